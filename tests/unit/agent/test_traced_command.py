"""Tracing a command, written once: its exit status, how it is let go, and what the caller's watch hears when.

The session is a fake (no probes, no store); the command is a real process
started held by the launcher, so exit statuses and signals are the real ones.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import ClassVar

import pytest

from gpuscope.agent import session as session_module
from gpuscope.agent.launch import CommandNotFoundError
from gpuscope.agent.live_stats import Tick
from gpuscope.agent.options import TraceOptions
from gpuscope.agent.session_plan import SessionPlan
from gpuscope.agent.traced_command import Ending, Process, TraceResult, Watch, trace_beside, trace_command

# Every wait in these tests ends by this deadline at the latest.
_DEADLINE_S = 30.0


class _FakeSession:
    """A TraceSession without probes or store: it records what was asked of it."""

    instances: ClassVar[list[_FakeSession]] = []
    # What the sessions do, set by a test (monkeypatch): a store failure the run ends with, an error it raises.
    fail_while_running: str | None = None
    raise_in_run: BaseException | None = None

    def __init__(self, plan: SessionPlan, *, tracer: object = None) -> None:
        self.plan = plan
        self.db_path = plan.db_path
        self.session_id = 7
        self.elapsed_s = 1.5
        self.targets: list[tuple[int, bool]] = []
        self.failure: str | None = None
        self.finished = 0
        self.alive_at_finish: list[bool] = []
        self.log: list[str] = []
        _FakeSession.instances.append(self)

    def add_target(self, pid: int, *, before_exec: bool = False) -> None:
        self.targets.append((pid, before_exec))

    def note_executable(self, path: str, env: Mapping[str, str] | None = None) -> None:
        self.log.append(f"executable {path}")

    def run(self, should_stop: Callable[[], bool], on_tick: Callable[[Tick], None] | None = None) -> None:
        self.log.append("run")
        if self.raise_in_run is not None:
            raise self.raise_in_run
        if on_tick is not None:
            on_tick(Tick(1.0, 10, 10.0, 0, 0))
        deadline = time.monotonic() + _DEADLINE_S
        while not should_stop() and time.monotonic() < deadline:
            if self.fail_while_running is not None:
                self.failure = self.fail_while_running
                return
            time.sleep(0.005)

    def finish(self) -> dict[str, int]:
        self.finished += 1
        self.alive_at_finish = [os.path.exists(f"/proc/{pid}") for pid, _ in self.targets]
        self.log.append("finish")
        return {"events": 10, "dropped": 0}


class _Recorder(Watch):
    """A watch that writes down every hook, in order."""

    def __init__(self, log: list[str], *, stop_after_s: float | None = None) -> None:
        self.log = log
        self.stop_after_s = stop_after_s
        self.proc: Process | None = None
        self.proc_running_when_stopped: bool | None = None

    def opened(self, session: object) -> None:
        self.log.append("opened")

    def begin(self, session: object) -> AbstractContextManager[object]:
        self.log.append("begin")

        @contextmanager
        def view() -> Iterator[None]:
            self.log.append("view on")
            try:
                yield
            finally:
                self.log.append("view off")

        return view()

    def should_stop(self, elapsed_s: float) -> bool:
        return self.stop_after_s is not None and elapsed_s >= self.stop_after_s

    def on_tick(self, tick: Tick) -> None:
        if "tick" not in self.log:
            self.log.append("tick")

    def closed(self) -> None:
        self.log.append("closed")

    def recording_stopped(self, session: object, proc: Process | None) -> None:
        self.log.append("recording stopped")
        self.proc_running_when_stopped = proc is not None and proc.poll() is None

    def left_running(self, proc: Process) -> None:
        self.log.append("left running")
        self.proc = proc


@pytest.fixture
def fake_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_FakeSession]]:
    _FakeSession.instances = []
    monkeypatch.setattr(session_module, "TraceSession", _FakeSession)
    yield _FakeSession


def _plan(tmp_path: Path, command: list[str] | None = None) -> SessionPlan:
    return SessionPlan.build(TraceOptions(), tmp_path / "t.db", node="n1", command=command)


def _session() -> _FakeSession:
    (session,) = _FakeSession.instances
    return session


@pytest.mark.usefixtures("fake_session")
def test_the_commands_exit_status_is_the_results_and_the_session_is_closed_after_it_ended(tmp_path: Path) -> None:
    # given a command that exits 3
    command = ["sh", "-c", "exit 3"]
    log: list[str] = []
    # when it is traced
    result = trace_command(_plan(tmp_path, command), command, _Recorder(log))
    # then its status is the result's, and the session recorded it from before its first instruction
    assert result.exit_status == 3
    assert result.failure is None
    assert (result.session_id, result.counters, result.elapsed_s) == (7, {"events": 10, "dropped": 0}, 1.5)
    session = _session()
    assert [before_exec for _, before_exec in session.targets] == [True]
    assert session.finished == 1
    # and the watch heard each stage in order, the view around the recording loop only
    assert log == ["opened", "begin", "view on", "tick", "view off", "closed"]


@pytest.mark.usefixtures("fake_session")
def test_the_program_is_noted_by_its_real_path_before_it_runs(tmp_path: Path) -> None:
    # given a program reached through a link on the PATH the command gets
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "mysh").symlink_to("/bin/sh")
    command = ["mysh", "-c", "exit 0"]
    # when traced
    trace_command(_plan(tmp_path, command), command, Watch(), env={"PATH": str(tmp_path / "bin")})
    # then the session learnt the file it runs (for its Python runtime) before the recording loop
    log = _session().log
    assert log[0] == f"executable {os.path.realpath('/bin/sh')}" and log.index("run") > 0, log


def test_a_command_that_cannot_run_opens_no_session(tmp_path: Path, fake_session: type[_FakeSession]) -> None:
    with pytest.raises(CommandNotFoundError):
        trace_command(_plan(tmp_path, ["no-such-program"]), ["no-such-program"], Watch(), env={"PATH": "/usr/bin"})
    assert fake_session.instances == []


@pytest.mark.usefixtures("fake_session")
def test_a_command_found_but_not_runnable_ends_the_trace_with_127(tmp_path: Path) -> None:
    # given an executable file the kernel cannot run (no ELF, no #!)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01\x02 not a program")
    garbage.chmod(0o755)
    # when traced, then its status is a shell's for a command it cannot run
    result = trace_command(_plan(tmp_path, [str(garbage)]), [str(garbage)], Watch())
    assert result.exit_status == 127


@pytest.mark.usefixtures("fake_session")
def test_a_command_that_cannot_be_made_a_target_never_runs_and_the_session_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a session that cannot trace the launched pid
    def refuse(self: _FakeSession, pid: int, *, before_exec: bool = False) -> None:
        raise ProcessLookupError(pid)

    monkeypatch.setattr(_FakeSession, "add_target", refuse)
    marker = tmp_path / "ran"
    command = ["touch", str(marker)]
    log: list[str] = []
    # when traced, then the error is raised
    with pytest.raises(ProcessLookupError):
        trace_command(_plan(tmp_path, command), command, _Recorder(log))
    # and the command never ran, the session is closed, and no command is said to run on
    assert not marker.exists()
    assert _session().finished == 1
    assert log[-1] == "closed"


@pytest.mark.usefixtures("fake_session")
def test_without_a_command_there_is_no_exit_status_and_the_watch_says_when_to_stop(tmp_path: Path) -> None:
    # given no command, and a watch that stops the trace at once
    log: list[str] = []
    # when traced
    result = trace_command(_plan(tmp_path), None, _Recorder(log, stop_after_s=0.0))
    # then
    assert result.exit_status is None
    assert _session().targets == []


@pytest.mark.usefixtures("fake_session")
def test_the_users_command_gets_sigint_at_the_end_of_the_duration(tmp_path: Path) -> None:
    command = ["sleep", "60"]
    result = trace_command(_plan(tmp_path, command), command, Watch(), duration_s=0.05)
    assert result.exit_status == 128 + signal.SIGINT


@pytest.mark.usefixtures("fake_session")
def test_the_callers_own_workload_is_killed_at_the_end_of_the_duration(tmp_path: Path) -> None:
    command = ["sleep", "60"]
    result = trace_command(_plan(tmp_path, command), command, Watch(), ending=Ending.KILL, duration_s=0.05)
    assert result.exit_status == 128 + signal.SIGKILL


@pytest.mark.usefixtures("fake_session")
def test_a_refusal_when_opened_closes_the_session_and_launches_nothing(tmp_path: Path) -> None:
    # given a watch that refuses what the session found
    class Refuses(Watch):
        def opened(self, session: object) -> None:
            raise LookupError("no CUDA library")

    marker = tmp_path / "ran"
    command = ["touch", str(marker)]
    # when traced, then the refusal is raised
    with pytest.raises(LookupError):
        trace_command(_plan(tmp_path, command), command, Refuses())
    # and the session is closed, the command never started
    assert _session().finished == 1
    assert not marker.exists()


@pytest.mark.usefixtures("fake_session")
def test_after_a_store_failure_the_session_closes_first_and_the_users_command_runs_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a store that fails while a command that exits 4 after a moment runs
    monkeypatch.setattr(_FakeSession, "fail_while_running", "disk full")
    command = ["sh", "-c", "sleep 1; exit 4"]
    log: list[str] = []
    watch = _Recorder(log)
    # when traced
    result = trace_command(_plan(tmp_path, command), command, watch)
    # then the session was closed while the command still ran, which was then waited for, not stopped
    assert watch.proc_running_when_stopped is True
    assert result.exit_status == 4
    assert result.failure == "disk full"
    assert log == ["opened", "begin", "view on", "tick", "view off", "closed", "recording stopped"]


@pytest.mark.usefixtures("fake_session")
def test_when_the_trace_raises_the_users_command_runs_on_untraced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a recording loop that raises while a command runs
    monkeypatch.setattr(_FakeSession, "raise_in_run", RuntimeError("tracer broke"))
    command = ["sleep", "60"]
    log: list[str] = []
    watch = _Recorder(log)
    # when traced
    with pytest.raises(RuntimeError, match="tracer broke"):
        trace_command(_plan(tmp_path, command), command, watch)
    # then the session is closed and the command left running, which the watch was told
    try:
        assert _session().alive_at_finish == [True]
        assert log[-2:] == ["closed", "left running"]
        assert watch.proc is not None and watch.proc.poll() is None
    finally:
        if watch.proc is not None:
            watch.proc.kill()
            watch.proc.wait(_DEADLINE_S)


@pytest.mark.usefixtures("fake_session")
def test_on_ctrl_c_the_users_command_is_not_reported_as_running_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a recording loop interrupted the way Ctrl-C outside the stop signals would
    monkeypatch.setattr(_FakeSession, "raise_in_run", KeyboardInterrupt())
    command = ["sleep", "60"]
    log: list[str] = []
    # when traced, then
    with pytest.raises(KeyboardInterrupt):
        trace_command(_plan(tmp_path, command), command, _Recorder(log))
    # the terminal sent Ctrl-C to the command as well: nothing is said about it
    assert "left running" not in log
    assert log[-1] == "closed"


@pytest.mark.usefixtures("fake_session")
def test_when_the_trace_raises_the_callers_own_workload_is_killed_before_the_session_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a recording loop that raises while the caller's workload runs
    monkeypatch.setattr(_FakeSession, "raise_in_run", RuntimeError("tracer broke"))
    command = ["sleep", "60"]
    log: list[str] = []
    # when traced, then
    with pytest.raises(RuntimeError, match="tracer broke"):
        trace_command(_plan(tmp_path, command), command, _Recorder(log), ending=Ending.KILL)
    # the workload was gone (killed and reaped) by the time the session closed, and nothing was said
    assert _session().alive_at_finish == [False]
    assert "left running" not in log


def test_a_tracer_handed_in_is_closed_when_the_session_cannot_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given probes loading, and a recording that cannot be opened
    closed: list[bool] = []

    class Probes:
        def close(self) -> None:
            closed.append(True)

    class Loading:
        def result(self) -> Probes:
            return Probes()

    def cannot_open(plan: SessionPlan, *, tracer: object = None) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(session_module, "TraceSession", cannot_open)
    # when traced, then the error is raised and the probes are closed
    with pytest.raises(PermissionError):
        trace_command(_plan(tmp_path), None, Watch(), tracer=Loading())  # type: ignore[arg-type]
    assert closed == [True]


@pytest.mark.usefixtures("fake_session")
def test_beside_a_body_the_session_polls_on_its_own_thread_until_the_body_returns(tmp_path: Path) -> None:
    # given a body that notes the thread it runs on, and the thread the recording loop runs on
    threads: dict[str, threading.Thread] = {}

    def body(session: _FakeSession) -> None:
        threads["body"] = threading.current_thread()
        deadline = time.monotonic() + _DEADLINE_S
        while "run" not in session.log and time.monotonic() < deadline:
            time.sleep(0.005)

    log: list[str] = []
    # when traced beside it
    result = trace_beside(_plan(tmp_path), body, _Recorder(log))  # type: ignore[arg-type]
    # then the body ran here, the loop elsewhere, and the session closed after both ended
    assert threads["body"] is threading.current_thread()
    assert _session().log == ["run", "finish"]
    assert isinstance(result, TraceResult) and result.exit_status is None
    # (the loop ticks on its own thread: before or after the view is on)
    assert [e for e in log if e != "tick"] == ["opened", "begin", "view on", "view off", "closed"]
    assert "tick" in log


@pytest.mark.usefixtures("fake_session")
def test_beside_a_body_the_recording_loops_error_is_raised_after_the_session_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_FakeSession, "raise_in_run", RuntimeError("ring broke"))
    log: list[str] = []
    with pytest.raises(RuntimeError, match="ring broke"):
        trace_beside(_plan(tmp_path), lambda session: None, _Recorder(log))
    assert _session().finished == 1
    assert log[-1] == "closed"
