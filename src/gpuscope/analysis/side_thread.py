"""One function run on a thread of its own, its exception handed back to whoever waits for it."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Background:
    """``work()`` on a new thread; ``finish`` waits for it and raises what it raised.

    A plain thread: concurrent.futures would cost every command 30 ms of
    imports (it loads logging). The work is numpy over large arrays for the
    most part, which lets go of the interpreter lock, so two such run at once
    on two CPUs.
    """

    def __init__(self, work: Callable[[], None], name: str) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as exc:  # handed to the waiting thread by finish()
            self._error = exc

    def finish(self) -> None:
        """Wait for the work; raise its exception, if it raised one."""
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
