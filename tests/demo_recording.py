"""Every demo scenario recorded synthetically into one file, as `gpuscope demo --synthetic` does."""

from __future__ import annotations

from pathlib import Path

from gpuscope.demo import REGISTRY, DemoMode, DemoRunner


def every_scenario(db: Path) -> Path:
    """Record each demo scenario (synthetic: no root, no compiler) into ``db``, one session each; return ``db``."""
    runner = DemoRunner(db)
    try:
        for scenario in REGISTRY:
            runner.run(scenario, DemoMode.SYNTHETIC)
    finally:
        runner.close()
    return db
