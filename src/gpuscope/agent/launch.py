"""Launch a command held before its first instruction, so the probes are in place when it starts.

The command starts under a small Python trampoline that blocks on a pipe and
then execs the command in the same pid. While it waits, the caller makes
that pid a trace target, so uprobes fire from the real command's very first
instruction. ``gpuscope trace -- CMD`` and the demo's workloads start their
processes here. ``StopSignals`` turns Ctrl-C and SIGTERM into a stop request
that ``finish`` passes on to the command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import IO, Any, TypeAlias

from gpuscope.errors import UsageError

# Wait for the go-ahead byte, then exec the command in the same pid. End of
# file instead of the byte (the launcher gave up or died) means: do not run it.
TRAMPOLINE = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "go = os.read(fd, 1)\n"
    "os.close(fd)\n"
    "if not go:\n"
    "    sys.exit(125)\n"
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as e:\n"
    "    sys.stderr.write(f'gpuscope: cannot run {sys.argv[2]}: {e.strerror}\\n')\n"
    "    sys.exit(127)\n"
)

_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

# How long a command may take to exit after being interrupted before it is killed.
DEFAULT_GRACE_S = 5.0


def launch_held(
    command: Sequence[str],
    attach: Callable[[int], None],
    *,
    env: dict[str, str] | None = None,
    stdout: int | IO[bytes] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` held, call ``attach(pid)``, then let it run.

    Args:
        command: the program and its arguments (looked up on PATH).
        attach: makes the pid a trace target; runs before the command's first instruction.
        env: its environment (default: ours).
        stdout: where its standard output goes (default: ours).

    Raises UsageError when the trampoline cannot start, and whatever ``attach``
    raises, in which case the command never runs (its trampoline is reaped).
    """
    r, w = os.pipe()
    try:
        # -I -S: no site-packages or user paths to set up (about 1.5 ms of
        # the trampoline's 12 ms); the command still gets the environment.
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", TRAMPOLINE, str(r), *command], pass_fds=(r,), env=env, stdout=stdout
        )
    except OSError as exc:
        os.close(w)
        raise UsageError(f"cannot launch {command[0]}: {exc.strerror}") from None
    finally:
        os.close(r)
    try:
        attach(proc.pid)
    except BaseException:
        os.close(w)  # end of file: the trampoline exits without running the command
        proc.wait()
        raise
    os.write(w, b"\n")
    os.close(w)
    return proc


def exit_status(returncode: int) -> int:
    """Convert a return code to a shell's exit status: the code itself, or 128 + N when killed by signal N."""
    return returncode if returncode >= 0 else 128 - returncode


def finish(proc: subprocess.Popen[bytes], *, signum: int = signal.SIGINT, grace_s: float = DEFAULT_GRACE_S) -> int:
    """Return the command's exit status, first stopping it if it still runs.

    A running command gets ``signum`` (the signal that stopped the tracing,
    SIGINT by default, as Ctrl-C would send), then SIGKILL after ``grace_s``.
    """
    if proc.poll() is None:
        proc.send_signal(signum)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return exit_status(proc.wait())


class StopSignals:
    """Inside ``with``: SIGINT and SIGTERM request a stop instead of raising; the old handlers return on exit.

    ``signum`` is the last of them received (None until one is), to pass on
    to a launched command with ``finish(proc, signum=...)``.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, _Handler] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def __enter__(self) -> StopSignals:
        for s in self.SIGNALS:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()
