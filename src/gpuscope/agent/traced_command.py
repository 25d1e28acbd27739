"""Trace a command: open the session, launch the command held, record until it ends, let it go, close the session.

``gpuscope trace`` (with a command, pids, or every process) and the demo's
workloads all run through here. What differs between them is handed in: a
``Watch`` for what the caller does while the trace runs (a live view and a
header, a demo's progress, nothing) and an ``Ending`` for whose command it is.
This layer never prints; whatever a person is told comes from the watch.

Light to import: the trace command subclasses ``Watch`` before the heavy
modules (numpy, the store) are loaded; the session is imported when a trace starts.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, TypeAlias

from gpuscope.agent.launch import CommandNotFoundError, StopSignals, check_runnable, finish, launch_held

if TYPE_CHECKING:
    from pathlib import Path

    from gpuscope.agent.background import Background
    from gpuscope.agent.live_stats import Tick
    from gpuscope.agent.session import TraceSession
    from gpuscope.agent.session_plan import SessionPlan
    from gpuscope.agent.tracer import Tracer

# A launched command (the trampoline that became it: the same pid).
Process: TypeAlias = subprocess.Popen[bytes]

# While the store has failed, how often a user's command still running is looked at.
_WAIT_POLL_S = 0.2


class Ending(enum.Enum):
    """Whose command it is, which says how it is let go when the trace ends."""

    # The user's (`gpuscope trace -- CMD`): Ctrl-C and SIGTERM stop the trace and are passed on to it (SIGKILL
    # after a grace period), and its exit status becomes the result's. It is never killed because the tracer
    # failed: it runs on untraced, and after the store fails it is waited for, so that a script sees it end
    # before gpuscope does.
    PASS_ON = "pass on"
    # The caller's own workload (a demo's): killed whenever the trace ends, for whatever reason. Ctrl-C
    # interrupts (KeyboardInterrupt) as it would anywhere else.
    KILL = "kill"


class Watch:
    """What a caller does while a trace runs: the live view, a demo's progress, or nothing.

    Every hook does nothing by default (a quiet trace): subclass and override
    what you need. A class rather than a ``Protocol`` so that the defaults are
    inherited.
    """

    def opened(self, session: TraceSession) -> None:
        """The recording is open and nothing is launched; stop signals are not taken yet.

        Add targets (pids) and check what was found here; raise to refuse (the session is closed).
        """
        return None

    def begin(self, session: TraceSession) -> AbstractContextManager[object]:
        """Right before the launch (stop signals taken): print a header, set up views.

        Returns the context the recording loop runs in (a live view on screen).
        """
        return contextlib.nullcontext()

    def command_stderr(self) -> int | None:
        """Where the launched command's stderr goes: a file descriptor, or None for ours."""
        return None

    def launched(self) -> None:
        """The command is running (and holds what ``command_stderr`` gave it)."""
        return None

    def should_stop(self, elapsed_s: float) -> bool:
        """Asked at every poll, ``elapsed_s`` after the launch: the caller's own reason to stop (or its progress)."""
        return False

    def on_tick(self, tick: Tick) -> None:
        """Once a second while recording."""
        return None

    def closed(self) -> None:
        """The session is closed (also when recording failed or raised): end what must not outlive it."""
        return None

    def recording_stopped(self, session: TraceSession, proc: Process | None) -> None:
        """``Ending.PASS_ON``: the store failed and the session is closed; ``proc`` is waited for next."""
        return None

    def left_running(self, proc: Process) -> None:
        """``Ending.PASS_ON``: the trace raised while the user's command runs on, untraced (not on Ctrl-C)."""
        return None


@dataclass(frozen=True, slots=True)
class TraceResult:
    """How a trace ended.

    session: the closed session (its statistics and late loads remain, for a summary).
    exit_status: the command's, as a shell reports it (128 + N when killed by signal N, 127 when it could not
        be run); None when no command was launched.
    counters: the kernel's counters at the end (events, dropped, ...).
    elapsed_s: from the session's start to the end of recording.
    failure: why recording stopped early (the store failed: "disk full", "error: ..."); None when it did not.
    """

    session: TraceSession
    exit_status: int | None
    counters: dict[str, int]
    elapsed_s: float
    failure: str | None = None

    @property
    def session_id(self) -> int:
        return self.session.session_id

    @property
    def db_path(self) -> Path:
        return self.session.db_path


def launch_traced(
    session: TraceSession,
    command: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stdout: int | IO[bytes] | None = None,
    stderr: int | None = None,
) -> Process:
    """Start ``command`` held, make it a target of ``session``, then let it run: traced from its first instruction.

    Raises the launcher's errors when it cannot start (see ``launch_held``), and what adding the target
    raises (the command never runs then).
    """
    # Its Python frames from its first call: registered by file before it runs (a short script can be
    # gone before its own maps are read), its runtime in the executable or in the libpython it loads.
    session.note_executable(os.path.realpath(check_runnable(command, env)), env)
    # A launcher about to exec the real command: described again at its exec (see TraceSession.add_target).
    return launch_held(
        command, lambda pid: session.add_target(pid, before_exec=True), env=env, stdout=stdout, stderr=stderr
    )


def trace_command(
    plan: SessionPlan,
    command: Sequence[str] | None,
    watch: Watch,
    *,
    tracer: Background[Tracer] | None = None,
    ending: Ending = Ending.PASS_ON,
    duration_s: float | None = None,
    env: dict[str, str] | None = None,
) -> TraceResult:
    """Trace ``command`` until it exits, a stop signal (``Ending.PASS_ON``), ``duration_s`` or the watch says so.

    Args:
        plan: what to record and where.
        command: the program and its arguments; None or empty launches nothing (the targets are then
            the ones ``watch.opened`` adds, or every process).
        watch: what the caller does meanwhile.
        tracer: the probes, already loading with ``plan.opts`` (closed here when the session cannot open);
            default: loaded by the session.
        ending: whose command it is (how it is let go).
        duration_s: the longest the trace runs after the launch (None or 0: no limit).
        env: the command's environment (default: ours).

    Raises what opening the session raises (permissions, BTF, the store), what the watch raises, and
    the launcher's errors when the command cannot start. A result with ``failure`` set means the store
    failed while recording.
    """
    if command:
        # A command that cannot run is not a recording: refused before the session, with the shell's 127.
        try:
            check_runnable(command, env)
        except CommandNotFoundError:
            if tracer is not None:
                with contextlib.suppress(Exception):
                    tracer.result().close()
            raise
    session = _open(plan, tracer)
    proc: Process | None = None
    try:
        watch.opened(session)
        # The user's command: Ctrl-C is a stop request from the moment the watch's header can say so,
        # even before the command is launched (it is then stopped at once).
        with StopSignals() if ending is Ending.PASS_ON else _NoStopSignals() as stop:
            view = watch.begin(session)
            if command:
                proc = launch_traced(session, command, env=env, stderr=watch.command_stderr())
                watch.launched()
            launched = time.monotonic()
            deadline = launched + duration_s if duration_s else None

            def should_stop() -> bool:
                if watch.should_stop(time.monotonic() - launched) or stop.requested:
                    return True
                if deadline is not None and time.monotonic() >= deadline:
                    return True
                return proc is not None and proc.poll() is not None

            with view:
                session.run(should_stop, watch.on_tick)
            failure = session.failure
            if failure is not None and ending is Ending.PASS_ON:
                return _after_store_failure(session, proc, watch, stop)
        status = None if proc is None else _let_go(proc, ending, stop.signum)
    except BaseException as exc:
        _after_error(session, proc, watch, ending, exc)
        raise
    elapsed = session.elapsed_s
    return TraceResult(session, status, _close(session, watch), elapsed, failure)


def trace_beside(
    plan: SessionPlan,
    body: Callable[[TraceSession], None],
    watch: Watch,
    *,
    tracer: Background[Tracer] | None = None,
) -> TraceResult:
    """Record while ``body(session)`` runs on this thread; the session polls on a thread of its own.

    For callers that launch their workloads as they go (with ``launch_traced``), such as a demo's
    scenario; what ``body`` starts is its own to stop before it returns. The trace ends when ``body``
    returns or raises. Raises what ``body`` raised, or else what the recording loop raised.
    """
    session = _open(plan, tracer)
    stop = threading.Event()
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            session.run(stop.is_set, watch.on_tick)
        except BaseException as exc:  # surfaced on the caller's thread
            failure.append(exc)

    try:
        watch.opened(session)
        view = watch.begin(session)
        # Started after begin: a thread takes the CPU affinity its starter has then.
        thread = threading.Thread(target=loop, name="gpuscope-trace", daemon=True)
        thread.start()
        try:
            with view:
                body(session)
        finally:
            stop.set()
            thread.join(30)
    finally:
        elapsed, failed = session.elapsed_s, session.failure
        counters = _close(session, watch)
    if failure:
        raise failure[0]
    return TraceResult(session, None, counters, elapsed, failed)


class _NoStopSignals:
    """Signals left as they are (``Ending.KILL``): Ctrl-C raises KeyboardInterrupt, no stop is ever requested."""

    requested = False
    signum: int | None = None

    def __enter__(self) -> _NoStopSignals:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _open(plan: SessionPlan, tracer: Background[Tracer] | None) -> TraceSession:
    # Imported here: numpy and the store are loaded once a trace starts, not when a command module is.
    from gpuscope.agent.session import TraceSession

    try:
        return TraceSession(plan, tracer=tracer)
    except BaseException:
        if tracer is not None:
            with contextlib.suppress(Exception):
                tracer.result().close()
        raise


def _close(session: TraceSession, watch: Watch) -> dict[str, int]:
    """Close the session (once; later calls repeat its counters), then tell the watch, whatever happened."""
    try:
        return session.finish()
    finally:
        watch.closed()


def _let_go(proc: Process, ending: Ending, signum: int | None) -> int:
    """The command's exit status, stopping it first if it still runs (as ``ending`` says)."""
    if ending is Ending.KILL:
        return finish(proc, signum=signal.SIGKILL)
    # The signal that stopped the trace, as Ctrl-C would have sent it to the command.
    return finish(proc, signum=signum or signal.SIGINT)


def _after_store_failure(
    session: TraceSession, proc: Process | None, watch: Watch, stop: StopSignals | _NoStopSignals
) -> TraceResult:
    """The store failed: close the recording now, leave the command unharmed and wait for it.

    Detaching first means the command runs on at full speed; it is never killed
    because the tracer failed. Ctrl-C and SIGTERM still reach it.
    """
    elapsed = session.elapsed_s
    counters = _close(session, watch)
    watch.recording_stopped(session, proc)
    status = None
    if proc is not None:
        while proc.poll() is None and not stop.requested:
            time.sleep(_WAIT_POLL_S)
        status = _let_go(proc, Ending.PASS_ON, stop.signum)
    return TraceResult(session, status, counters, elapsed, session.failure)


def _after_error(session: TraceSession, proc: Process | None, watch: Watch, ending: Ending, exc: BaseException) -> None:
    """The trace raised: close the session, and let the command go as ``ending`` says."""
    if ending is Ending.KILL:
        # The workload must not outlive the trace, even on Ctrl-C.
        if proc is not None:
            _let_go(proc, ending, None)
        _close(session, watch)
        return
    _close(session, watch)
    if proc is not None and proc.poll() is None and not isinstance(exc, KeyboardInterrupt):
        # The tracer failed, not the command: it is left to run, detached from the probes.
        watch.left_running(proc)
