"""Answers kept while the recording they were computed from is unchanged."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class ReportCache:
    """Explain reports by options, while the recording is unchanged; one computation at a time per options.

    Explain over a large recording takes seconds; the dashboard's page asks
    for the same window's overview, ops and findings together, every few
    seconds. A report is reused while the file and its WAL keep their size and
    modification time, so a recording in progress is re-read as it grows.
    """

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._entries: dict[Any, tuple[Any, Any]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Any, signature: Any, compute: Callable[[], Any]) -> Any:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == signature:
                return hit[1]
            value = compute()
            with self._guard:
                self._entries.pop(key, None)
                self._entries[key] = (signature, value)
                while len(self._entries) > self.size:
                    oldest = next(iter(self._entries))
                    self._entries.pop(oldest)
                    self._locks.pop(oldest, None)
            return value
