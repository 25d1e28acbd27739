"""Attaching to running processes by pid, stopping with Ctrl-C, and refusing bad requests."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from gpuscope.agent.options import TraceOptions
from gpuscope.agent.tracer import Tracer
from tests.conftest import TraceRun, run_gpuscope
from tests.privileged.support import LineReader, background, free_pid, gpuscope_cmd, session_drops


def lib_args(standin) -> list[str]:
    return ["--lib", str(standin.cudart), "--lib", str(standin.cuda)]


def start_looping(exe: Path, standin):
    """A cuda_loop process, returned once it has made its first calls."""
    return background([str(exe), "60"], stdout=subprocess.PIPE, env=standin.env())


def wait_ready(proc: subprocess.Popen[str]) -> LineReader:
    out = LineReader(proc.stdout)
    out.wait_for(lambda line: line.strip() == "ready", timeout=30)
    return out


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_tracing_a_pid_records_that_process_and_no_other(build_workload, standin, tmp_path):
    # given two running processes calling CUDA every 10 ms
    exe = build_workload("cuda_loop.c")
    with start_looping(exe, standin) as target, start_looping(exe, standin) as bystander:
        wait_ready(target)
        wait_ready(bystander)
        # when only the first is traced, for 2 seconds
        db = tmp_path / "pid.db"
        p = run_gpuscope(
            "trace", "--pid", str(target.pid), "--duration", "2s", "--db", str(db), *lib_args(standin), timeout=60
        )
        run = TraceRun(db, p.returncode, p.stdout, p.stderr)
        # then the trace ends by itself and the target keeps running
        assert run.returncode == 0, run.stderr
        assert target.poll() is None
    # and its calls are recorded (about 200 batches in 2 s), all under its pid
    counts = run.op_counts()
    assert counts.get("cudaLaunchKernel", 0) >= 20, counts
    # A batch at each edge may be cut: the launches' probes (the overhead budget probes them in windows, in
    # links of their own) attach and detach a few ms apart from the syncs'.
    assert abs(counts["cudaLaunchKernel"] - counts["cudaStreamSynchronize"]) <= 3
    # CUDA calls and scheduler events are the target's; block I/O, TCP and page
    # allocations are machine-wide context and may name other processes.
    assert run.query("SELECT DISTINCT pid FROM events WHERE source != 'host' OR op LIKE 'sched_%'") == [(target.pid,)]
    assert run.query("SELECT targets FROM sessions") == [(f"[{target.pid}]",)]


def test_ctrl_c_ends_a_pid_trace_cleanly_and_closes_the_session(build_workload, standin, tmp_path):
    # given a trace of a running process that has recorded for a second
    exe = build_workload("cuda_loop.c")
    db = tmp_path / "sigint.db"
    with start_looping(exe, standin) as target:
        wait_ready(target)
        cmd = gpuscope_cmd("trace", "--pid", str(target.pid), "--db", str(db), *lib_args(standin))
        with background(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as tracer:
            err = LineReader(tracer.stderr)
            err.wait_for(lambda line: line.startswith("Hit Ctrl-C to end."), timeout=60)
            err.wait_for(lambda line: line.startswith("[") and " events " in line, timeout=30)
            # when it gets SIGINT
            os.kill(tracer.pid, signal.SIGINT)
            returncode = tracer.wait(timeout=30)
            assert tracer.stdout is not None  # started with stdout=PIPE
            stdout = tracer.stdout.read()
            stderr = err.rest(timeout=10)
        # then it exits 0 with its summary, and leaves the traced process alone
        assert returncode == 0, stderr
        assert "Traceback" not in stderr
        assert "recorded to" in stderr and "cudaLaunchKernel" in stderr
        assert stdout == ""  # the summary is for a person: stderr
        assert target.poll() is None
    # and the session is closed, with what was recorded
    run = TraceRun(db, returncode, stdout, stderr)
    ((stopped, recorded),) = run.query("SELECT stopped_wall_ns, events_recorded FROM sessions")
    assert stopped is not None
    # every event is stored (short run: selective storage keeps the first seconds whole)
    assert recorded == run.query("SELECT count(*) FROM events")[0][0]
    assert run.op_counts().get("cudaLaunchKernel", 0) > 0
    # CUDA calls and scheduler events are the target's; block I/O, TCP and page
    # allocations are machine-wide context and may name other processes.
    assert run.query("SELECT DISTINCT pid FROM events WHERE source != 'host' OR op LIKE 'sched_%'") == [(target.pid,)]


def test_a_pid_that_does_not_exist_is_refused_with_one_error_line(standin, tmp_path):
    # given a pid no process has
    pid = free_pid()
    # when
    p = run_gpuscope(
        "trace", "--pid", str(pid), "--duration", "1s", "--db", str(tmp_path / "x.db"), *lib_args(standin), timeout=60
    )
    # then
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert len(error_lines(p.stderr)) == 1
    assert str(pid) in error_lines(p.stderr)[0]


def test_an_unwritable_database_path_is_refused_before_the_command_runs(standin, tmp_path):
    # given a database path that cannot be created, and a command that leaves a mark if it runs
    marker = tmp_path / "ran"
    # when
    p = run_gpuscope(
        "trace", "--db", "/proc/forbidden/x.db", *lib_args(standin), "--", "touch", str(marker), timeout=60
    )
    # then
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    errors = error_lines(p.stderr)
    assert len(errors) == 1 and "/proc/forbidden/x.db" in errors[0]
    assert not marker.exists()


def test_returns_in_processes_not_traced_are_not_counted_as_unmatched(build_workload, standin, tmp_path):
    # given a traced process and an untraced one, both calling CUDA every 10 ms
    exe = build_workload("cuda_loop.c")
    with start_looping(exe, standin) as target, start_looping(exe, standin) as bystander:
        wait_ready(target)
        wait_ready(bystander)
        # when only the first is traced for 1 second
        db = tmp_path / "unmatched.db"
        p = run_gpuscope(
            "trace", "--pid", str(target.pid), "--duration", "1s", "--db", str(db), *lib_args(standin), timeout=60
        )
        run = TraceRun(db, p.returncode, p.stdout, p.stderr)
    # then at most the one call the target was inside at attach time returns unmatched
    assert run.returncode == 0, run.stderr
    assert session_drops(run)["unmatched_ret"] <= 1


def test_the_detach_keeps_its_order_while_a_traced_process_may_still_call() -> None:
    # given a tracer of chosen processes, and one of them running
    child = subprocess.Popen(["sleep", "30"])
    tracer = Tracer(TraceOptions(filter_targets=True))
    try:
        assert not tracer.targets_alive()  # nothing chosen yet
        tracer.add_target(child.pid)
        # then while it runs, its calls could cross the detach (returns must go before entries)
        assert tracer.targets_alive()
        # and once it has exited, none can: the links may all go at once
        child.kill()
        child.wait(timeout=10)
        assert not tracer.targets_alive()
    finally:
        tracer.detach()
        tracer.close()
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    # and tracing every process keeps the order whatever runs
    everyone = Tracer(TraceOptions(filter_targets=False))
    try:
        assert everyone.targets_alive()
    finally:
        everyone.close()
