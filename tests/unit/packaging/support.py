"""Helpers of the packaging tests: the checkout, and a wheel built from it as `make wheel` builds one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def build_wheel(out: Path, **env: str) -> Path:
    """Build the wheel as `make wheel` does (pip wheel --no-deps) and return its path."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("gpuscope-*.whl")
    return wheel
