"""Launching a command held until its probes are attached, stopping it, and its exit status."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.agent.launch import StopSignals, exit_status, finish, launch_held


def test_the_command_runs_only_after_attach_and_keeps_the_attached_pid(tmp_path: Path) -> None:
    # given a command that writes its own pid
    out = tmp_path / "pid"
    seen: list[tuple[int, bool]] = []

    def attach(pid: int) -> None:
        seen.append((pid, out.exists()))

    # when it is launched held and allowed to finish
    proc = launch_held(["sh", "-c", f"echo $$ > {out}"], attach)
    status = exit_status(proc.wait(timeout=30))
    # then attach saw the pid before the command had run, and exec kept that pid
    assert status == 0
    assert seen == [(proc.pid, False)]
    assert int(out.read_text()) == proc.pid


def test_a_failed_attach_means_the_command_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    def attach(pid: int) -> None:
        raise RuntimeError("no probes")

    with pytest.raises(RuntimeError, match="no probes"):
        launch_held(["touch", str(marker)], attach)
    assert not marker.exists()


@pytest.mark.parametrize(("script", "status"), [("exit 7", 7), ("kill -TERM $$", 128 + signal.SIGTERM)])
def test_the_exit_status_is_the_code_or_128_plus_the_killing_signal(script: str, status: int) -> None:
    proc = launch_held(["sh", "-c", script], lambda pid: None)
    assert exit_status(proc.wait(timeout=30)) == status


def test_a_program_that_cannot_be_run_exits_127_with_a_message(capfd: pytest.CaptureFixture[str]) -> None:
    proc = launch_held(["/nonexistent/program"], lambda pid: None)
    assert exit_status(proc.wait(timeout=30)) == 127
    assert "gpuscope: cannot run /nonexistent/program: No such file or directory" in capfd.readouterr().err


def test_a_running_command_is_stopped_with_the_signal_passed_on() -> None:
    proc = launch_held(["sleep", "60"], lambda pid: None)
    assert finish(proc, signum=signal.SIGTERM) == 128 + signal.SIGTERM


def test_a_command_that_ignores_the_signal_is_killed_after_the_grace_period() -> None:
    # given a command that ignores SIGINT, and says so once it does
    code = (
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    proc = launch_held([sys.executable, "-c", code], lambda pid: None, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    # when it is finished with SIGINT and a short grace
    status = finish(proc, signum=signal.SIGINT, grace_s=0.2)
    # then
    proc.stdout.close()
    assert status == 128 + signal.SIGKILL


def test_finishing_a_command_that_has_exited_returns_its_status_without_a_signal() -> None:
    proc = launch_held(["sh", "-c", "exit 3"], lambda pid: None)
    proc.wait(timeout=30)
    assert finish(proc, signum=signal.SIGKILL) == 3


def test_stop_signals_turn_sigterm_into_a_request_and_restore_the_old_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert not stop.requested
        signal.raise_signal(signal.SIGTERM)
    assert (stop.requested, stop.signum) == (True, signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_command_gets_the_whole_environment_python_variables_included() -> None:
    # The trampoline runs isolated (-I -S); the command it execs must not be.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/opt/somewhere", "GPUSCOPE_PROBE": "1"}
    proc = launch_held(
        ["sh", "-c", 'echo "$PYTHONPATH $GPUSCOPE_PROBE"'], lambda pid: None, env=env, stdout=subprocess.PIPE
    )
    out, _ = proc.communicate(timeout=30)
    assert out == b"/opt/somewhere 1\n"
