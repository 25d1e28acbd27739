"""Run one slow call on a thread while the caller gets on with other work.

Start-up and shutdown of a trace wait mostly in the kernel: the verifier
loading the BPF objects, and RCU grace periods when probes are detached.
ctypes and ``os.close`` let go of the GIL there, so Python work (imports,
library discovery, opening the recording, draining the ring) runs meanwhile
on the other CPU.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` running on its own thread; ``result()`` waits for it and returns or raises what it did."""

    def __init__(self, fn: Callable[[], T], *, name: str) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Signals go to the main thread (Python handles them there anyway): one
        # that lands on this thread while the verifier runs makes the load fail
        # with EAGAIN once libbpf's few retries are spent (a SIGCHLD, SIGWINCH).
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait at most ``timeout_s`` (None: until it ends); return whether it has ended."""
        self._thread.join(timeout_s)
        return self.done()

    def result(self) -> T:
        """Wait for the call to end; return its value, or raise its exception here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
