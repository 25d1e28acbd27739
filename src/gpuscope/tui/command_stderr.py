"""The traced command's stderr while the full-screen view holds the terminal: relayed, shown, never lost.

``trace -- CMD > train.log`` gets the full-screen view, but the command's
stderr (warnings, tracebacks, tqdm's progress bars) would be written onto that
screen, drawn over at the next refresh, and gone with the alternate screen at
the end. So the command's stderr is a pseudo-terminal of its own (it still is a
terminal, of the same size: programs keep their colours and progress bars);
a thread reads it, keeps everything in a spool (memory, then a temporary file
past 8 MiB), and the last lines for the view to show. When the view has closed,
the whole of it is written to our stderr, in order, before the summary.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import struct
import tempfile
import termios
import threading

_SPOOL_IN_MEMORY = 8 << 20
_READ = 65536
# After the command has exited, what its children may still write is waited for this long.
_DRAIN_S = 1.0


class CommandStderr:
    """A pseudo-terminal for a launched command's stderr, read on a thread of its own.

    ``fd``: the terminal end to give the command (``launch_held(stderr=...)``);
    ``launched()`` once it has it; ``tail(n)``: its last lines, for the view;
    ``replay(fd)``: everything it wrote, written to ``fd`` once the view has closed.
    """

    def __init__(self, like_fd: int) -> None:
        self._master, self.fd = os.openpty()
        with contextlib.suppress(OSError):
            # The size of our terminal: a progress bar fits the screen it will be replayed on.
            size = fcntl.ioctl(like_fd, termios.TIOCGWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
            fcntl.ioctl(self.fd, termios.TIOCSWINSZ, size)
        # Open for the command's whole run, closed by replay: no single block holds it.
        self._spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115
        self._replayed = False
        self._lines: collections.deque[str] = collections.deque(maxlen=64)
        self._partial = ""
        self._lock = threading.Lock()
        self.written = 0
        self._thread = threading.Thread(target=self._read, name="gpuscope-command-stderr", daemon=True)
        self._thread.start()

    def launched(self) -> None:
        """The command holds the terminal end: ours is closed, so its end of file is the command's."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, _READ)
            except OSError:  # EIO: every holder of the terminal end has closed it
                return
            if not data:
                return
            with self._lock:
                if self._replayed:  # a child that outlived the command, writing after the replay: dropped
                    continue
                self._spool.write(data)
                self.written += len(data)
                self._take(data.decode("utf-8", "replace"))

    def _take(self, text: str) -> None:
        """Split into lines for the view; a carriage return (a progress bar's redraw) starts the line again."""
        parts = (self._partial + text).replace("\r\n", "\n").split("\n")
        self._partial = parts.pop()
        for line in parts:
            self._lines.append(line.rsplit("\r", 1)[-1])
        self._partial = self._partial.rsplit("\r", 1)[-1]

    def tail(self, n: int) -> list[str]:
        """The last ``n`` lines the command wrote (the one it is writing last)."""
        with self._lock:
            lines = [*self._lines, self._partial] if self._partial else list(self._lines)
        return lines[-n:] if n > 0 else []

    def replay(self, out_fd: int) -> int:
        """Write all the command wrote to ``out_fd`` (after its children's last words); returns the bytes."""
        self.launched()
        self._thread.join(_DRAIN_S)
        if not self._thread.is_alive():
            os.close(self._master)
        with self._lock:
            # A child that outlived the command may still hold the terminal: the reader then stays (a daemon,
            # gone with this process), and the lock keeps the spool whole while it is read.
            self._spool.seek(0)
            total = 0
            while chunk := self._spool.read(_READ):
                with contextlib.suppress(OSError):  # our stderr closed (`2>&1 | head`): nothing to show it on
                    total += _write_all(out_fd, chunk)
            self._spool.close()
            self._replayed = True
        return total


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    return len(data)
