"""A pid that no longer runs, for tests that tell a live owner from a dead one (a live one: the ``live_pid`` fixture)."""

from __future__ import annotations

import subprocess
import sys


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)
