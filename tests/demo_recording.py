"""Demo scenarios recorded synthetically into one file, as `gpuscope demo --synthetic` does."""

from __future__ import annotations

from pathlib import Path

from gpuscope.demo import REGISTRY, DemoMode, DemoRunner


def scenarios(db: Path, names: tuple[str, ...], scale: float = 0.3) -> Path:
    """Record the named demo scenarios (synthetic) into ``db`` in this order, one session each; return ``db``."""
    runner = DemoRunner(db, scale=scale)
    try:
        for name in names:
            (scenario,) = [s for s in REGISTRY if s.name == name]
            runner.run(scenario, DemoMode.SYNTHETIC)
    finally:
        runner.close()
    return db


def every_scenario(db: Path) -> Path:
    """Record each demo scenario (synthetic: no root, no compiler) into ``db``, one session each; return ``db``."""
    return scenarios(db, tuple(s.name for s in REGISTRY), scale=1.0)
