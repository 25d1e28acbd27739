"""Who has a recording open right now, learnt without opening it.

An SQLite connection in WAL mode holds a shared POSIX lock on its database
file (and one on the ``-shm`` file) for as long as it is open, idle or not.
The kernel lists those locks in ``/proc/locks``, so the processes that have a
recording open can be read there without touching the file: opening and
closing a descriptor of a database would drop every POSIX lock *this* process
holds on it, which is exactly what must never happen in a process that also
has it open through SQLite.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC_LOCKS = Path("/proc/locks")


def lock_holders(path: str | os.PathLike[str], *, proc_locks: Path = PROC_LOCKS) -> set[int]:
    """Return the pids holding a POSIX or OFD lock on ``path`` (empty when none, or unknowable).

    ``proc_locks`` is for tests: the text of another ``/proc/locks``.
    """
    return _holders([path], proc_locks)


def recording_holders(path: str | os.PathLike[str], *, proc_locks: Path = PROC_LOCKS) -> set[int]:
    """Return the pids that have the recording open through SQLite (its file or its ``-shm``)."""
    return _holders([path, f"{os.fspath(path)}-shm"], proc_locks)


def _holders(paths: list[str | os.PathLike[str]], proc_locks: Path) -> set[int]:
    """The pids holding a lock on any of ``paths``; ``/proc/locks`` is read once (a few ms on a busy host)."""
    want = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        want.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    if not want:
        return set()
    try:
        text = proc_locks.read_text()
    except OSError:
        return set()
    holders: set[int] = set()
    for line in text.splitlines():
        fields = line.split()
        if "->" in fields:  # a waiter, not a holder
            continue
        # "1: POSIX  ADVISORY  READ 3940 fe:00:2148939 128 128"
        if len(fields) < 6 or fields[1] not in ("POSIX", "OFDLCK"):
            continue
        try:
            major, minor, inode = fields[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        if key in want:
            holders.add(pid)
    return holders


def wal_has_frames(path: str | os.PathLike[str]) -> bool:
    """Tell whether the recording's ``-wal`` holds anything beyond its 32-byte header."""
    try:
        return os.path.getsize(f"{os.fspath(path)}-wal") > 32
    except OSError:
        return False
