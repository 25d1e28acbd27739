"""How the writer commits: how often and how much it lets wait (``Durability``), how far each commit says the
recording is complete (``ReadMark``), and which failures are a full disk."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

__all__ = ["NOW", "Durability", "NowMark", "ReadMark", "is_disk_full"]


@dataclass(frozen=True, slots=True)
class ReadMark:
    """How far the events read so far are complete: up to ``wall_ns``/``mono_ns``, ``events_seen`` in all.

    The moment of the read where it emptied the ring; where the ring still
    held a backlog, the end of the newest event read (what followed it was
    still in the kernel). ``events_seen``: events read up to then, stored or
    only counted (selective storage).
    """

    wall_ns: int
    mono_ns: int
    events_seen: int | None = None


class NowMark:
    """``EventWriter.put``'s default mark: the batch completes the reading up to the moment it is put."""


NOW = NowMark()


@dataclass(frozen=True, slots=True)
class Durability:
    """How often the writer commits, and how much it lets wait.

    A SIGKILL loses what is not committed: at most ``commit_every_s`` of
    transaction plus what waits in the queue, which is bounded in time:
    ``pending_s`` of rows at the writer's measured insert rate (between
    ``min_pending_rows`` and ``max_pending_rows``). So all but about the last
    half second of a recording survives.
    """

    commit_every_s: float = 0.2
    rows_per_commit: int = 50_000
    pending_s: float = 0.1
    min_pending_rows: int = 4_096
    max_pending_rows: int = 100_000


def is_disk_full(exc: BaseException) -> bool:
    """Tell whether SQLite failed because the file system is full (SQLITE_FULL, or ENOSPC as an I/O error)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code == 13:  # SQLITE_FULL
        return True
    return isinstance(exc, sqlite3.Error) and ("disk is full" in str(exc) or "No space left" in str(exc))
