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
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from types import FrameType, TracebackType
from typing import IO, Any, TypeAlias

from gpuscope.errors import GpuscopeError, UsageError

# Wait for the go-ahead byte, then exec the command in the same pid. End of
# file instead of the byte (the launcher gave up or died) means: do not run it.
# Before the exec, every signal gets back the disposition gpuscope was started
# with (ignored ones stay ignored, the rest default) and the signal mask too:
# Python ignores SIGPIPE and SIGXFSZ for itself, and an exec keeps what is
# ignored, so `gpuscope trace -- cmd | head` would otherwise never see a broken pipe.
TRAMPOLINE = (
    "import os, signal, sys\n"
    "fd = int(sys.argv[1])\n"
    "ignored = {int(n) for n in sys.argv[2].split(',') if n}\n"
    "mask = {int(n) for n in sys.argv[3].split(',') if n}\n"
    "go = os.read(fd, 1)\n"
    "os.close(fd)\n"
    "if not go:\n"
    "    sys.exit(125)\n"
    "for s in signal.valid_signals():\n"
    "    if s not in (signal.SIGKILL, signal.SIGSTOP):\n"
    "        try:\n"
    "            signal.signal(s, signal.SIG_IGN if s in ignored else signal.SIG_DFL)\n"
    "        except (OSError, ValueError):\n"
    "            pass\n"
    "signal.pthread_sigmask(signal.SIG_SETMASK, mask)\n"
    "try:\n"
    "    os.execvp(sys.argv[4], sys.argv[4:])\n"
    "except OSError as e:\n"
    "    sys.stderr.write(f'gpuscope: cannot run {sys.argv[4]}: {e.strerror}\\n')\n"
    "    sys.exit(127)\n"
)


def _started_with() -> tuple[frozenset[int], frozenset[int]]:
    """(ignored signals, blocked signals) as this process was started, for the command to start with too.

    Read when this module is imported, before gpuscope handles any signal of its
    own. SIGPIPE and SIGXFSZ are ignored by Python itself at start-up; a shell
    gives them their default, as ``subprocess``'s ``restore_signals`` assumes.
    """
    ignored = set()
    for s in signal.valid_signals():
        try:
            if signal.getsignal(s) == signal.SIG_IGN:
                ignored.add(int(s))
        except (OSError, ValueError):
            continue
    ignored -= {int(signal.SIGPIPE), int(getattr(signal, "SIGXFSZ", signal.SIGPIPE))}
    return frozenset(ignored), frozenset(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))


_IGNORED_AT_START, _BLOCKED_AT_START = _started_with()


class CommandNotFoundError(GpuscopeError):
    """The command to trace cannot be run: no such program on its PATH, or not executable."""

    exit_code = 127  # what a shell answers for a command it cannot run
    remedy = "give its full path (`command -v NAME` in your own shell prints it)"


def check_runnable(command: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The path ``command[0]`` runs, looked up on the PATH it will get; raises CommandNotFoundError."""
    name = command[0] if command else ""
    path_var = (env if env is not None else os.environ).get("PATH", os.defpath)
    if "/" in name:
        found = name if os.path.isfile(name) and os.access(name, os.X_OK) else None
        why = "not an executable file" if os.path.exists(name) else "no such file"
    else:
        found = shutil.which(name, path=path_var) if name else None
        why = f"not found on PATH ({path_var})"
    if found is None:
        remedy = CommandNotFoundError.remedy
        if os.geteuid() == 0 and "SUDO_USER" in os.environ:
            remedy += "; sudo runs commands with its own PATH (secure_path), not yours"
        raise CommandNotFoundError(f"cannot run {name or 'an empty command'}: {why}", remedy)
    return found


_Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

# How long a command may take to exit after being interrupted before it is killed.
DEFAULT_GRACE_S = 5.0


def launch_held(
    command: Sequence[str],
    attach: Callable[[int], None],
    *,
    env: dict[str, str] | None = None,
    stdout: int | IO[bytes] | None = None,
    stderr: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` held, call ``attach(pid)``, then let it run.

    Args:
        command: the program and its arguments (looked up on PATH).
        attach: makes the pid a trace target; runs before the command's first instruction.
        env: its environment (default: ours).
        stdout: where its standard output goes (default: ours).
        stderr: where its standard error goes (default: ours).

    Raises CommandNotFoundError (exit status 127) when the command cannot run,
    before anything is attached; UsageError when the trampoline cannot start;
    and whatever ``attach`` raises, in which case the command never runs (its
    trampoline is reaped).
    """
    check_runnable(command, env)
    r, w = os.pipe()
    try:
        # -I -S: no site-packages or user paths to set up (about 1.5 ms of
        # the trampoline's 12 ms); the command still gets the environment.
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", TRAMPOLINE, str(r), _signals(_IGNORED_AT_START),
             _signals(_BLOCKED_AT_START), *command],
            pass_fds=(r,),
            env=env,
            stdout=stdout,
            stderr=stderr,
        )  # fmt: skip
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


def _signals(numbers: frozenset[int]) -> str:
    return ",".join(str(n) for n in sorted(numbers))


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
