"""Processes for tests that tell a live owner from a dead one: a pid that runs, and one that no longer does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The pid of a process that runs until the test ends."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield child.pid
    assert child.stdin is not None
    child.stdin.close()
    child.wait()
