"""Run a command as another user (``nobody``), for tests of what such a user may and may not do."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NOBODY = 65534


@functools.cache
def _nobody_prefix() -> list[str] | None:
    """The command prefix that runs this interpreter as nobody, or None where that cannot be done."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return None
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import gpuscope"], capture_output=True, timeout=60)
    return prefix if probe.returncode == 0 else None


def as_nobody(argv: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the user nobody, with a home and cache of its own under ``home`` (skips where impossible)."""
    prefix = _nobody_prefix()
    if prefix is None:
        pytest.skip("cannot run this interpreter as the user nobody here")
    home.mkdir(exist_ok=True)
    os.chown(home, NOBODY, NOBODY)
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / "cache"))
    return subprocess.run([*prefix, *argv], env=env, capture_output=True, text=True, timeout=120)
