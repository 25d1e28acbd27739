"""Launching a command held until its probes are attached, stopping it, and its exit status."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.agent.launch import (
    CommandNotFoundError,
    StopSignals,
    check_runnable,
    exit_status,
    finish,
    launch_held,
)


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


def test_a_program_found_but_not_runnable_exits_127_with_a_message(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # given an executable file the kernel cannot run (no ELF, no #!)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01\x02 not a program")
    garbage.chmod(0o755)
    proc = launch_held([str(garbage)], lambda pid: None)
    assert exit_status(proc.wait(timeout=30)) == 127
    assert f"gpuscope: cannot run {garbage}: Exec format error" in capfd.readouterr().err


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["/nonexistent/program"], "no such file"),
        (["no-such-program-here"], "not found on PATH (/usr/bin:/bin)"),
        (["{tmp}/notes.txt"], "not an executable file"),
        (["{tmp}"], "not an executable file"),
    ],
)
def test_a_command_that_cannot_run_is_refused_before_anything_is_attached(
    tmp_path: Path, command: list[str], why: str
) -> None:
    (tmp_path / "notes.txt").write_text("a file without execute bits\n")
    command = [c.format(tmp=tmp_path) for c in command]
    attached: list[int] = []
    with pytest.raises(CommandNotFoundError) as err:
        launch_held(command, attached.append, env={"PATH": "/usr/bin:/bin"})
    # then nothing started, the error is one line, and the exit status is the shell's for it
    assert attached == []
    assert str(err.value) == f"cannot run {command[0]}: {why}"
    assert err.value.exit_code == 127 and "full path" in err.value.remedy


def test_the_command_is_looked_up_on_the_path_it_will_get(tmp_path: Path) -> None:
    tool = tmp_path / "mytool"
    tool.write_text("#!/bin/sh\nexit 7\n")
    tool.chmod(0o755)
    assert check_runnable(["mytool"], {"PATH": str(tmp_path)}) == str(tool)
    with pytest.raises(CommandNotFoundError):
        check_runnable(["mytool"], {"PATH": "/usr/bin"})


def _status_field(out: str, name: str) -> int:
    return int(next(line.split()[1] for line in out.splitlines() if line.startswith(name + ":")), 16)


# Launch `grep Sig /proc/self/status` from a fresh interpreter whose start `PRELUDE` sets up (as a shell would).
_LAUNCH = """
import signal, subprocess, sys
{prelude}
from gpuscope.agent.launch import launch_held
proc = launch_held(["grep", "^Sig", "/proc/self/status"], lambda pid: None, stdout=subprocess.PIPE)
sys.stdout.write(proc.communicate()[0].decode())
"""


def _launched_status(prelude: str = "") -> str:
    p = subprocess.run(
        [sys.executable, "-c", _LAUNCH.format(prelude=prelude)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


PYTHONS_OWN = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))


def _inherited_ignores() -> int:
    """What this environment ignores, as the shell passed it down: our own SigIgn less Python's two."""
    return _status_field(Path("/proc/self/status").read_text(), "SigIgn") & ~PYTHONS_OWN


def test_the_command_gets_sigpipe_and_sigxfsz_at_their_default_not_pythons_ignore() -> None:
    ignored = _status_field(_launched_status(), "SigIgn")
    assert not ignored & PYTHONS_OWN, hex(ignored)
    # and every other disposition is what this environment passed down (nothing, from a plain shell)
    assert ignored == _inherited_ignores(), (hex(ignored), hex(_inherited_ignores()))


def test_signals_the_shell_ignored_or_blocked_stay_so_for_the_command() -> None:
    # given gpuscope started as `nohup` would start it, with SIGUSR1 blocked
    out = _launched_status(
        "signal.signal(signal.SIGHUP, signal.SIG_IGN); signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})"
    )
    # then the command starts with SIGHUP ignored and SIGUSR1 blocked, as it would have untraced
    assert _status_field(out, "SigIgn") == _inherited_ignores() | 1 << (signal.SIGHUP - 1)
    assert _status_field(out, "SigBlk") & (1 << (signal.SIGUSR1 - 1))


def test_a_pipeline_that_closes_early_ends_the_writer_quietly_as_untraced(capfd: pytest.CaptureFixture[str]) -> None:
    # `yes | head -1`: yes dies of SIGPIPE, without a "Broken pipe" message, and the pipeline exits 0
    proc = launch_held(["sh", "-c", "yes | head -1"], lambda pid: None)
    assert exit_status(proc.wait(timeout=30)) == 0
    captured = capfd.readouterr()
    assert captured.out.startswith("y\n") and "Broken pipe" not in captured.err, captured


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
