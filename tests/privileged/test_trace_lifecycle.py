"""Process lifecycle: forked children are followed through exec, exits are recorded with their code."""

from __future__ import annotations

from tests.conftest import run_gpuscope
from tests.privileged.support import session_drops


def parent_and_child(stdout: str) -> tuple[int, int]:
    ids = dict(line.split() for line in stdout.splitlines() if line.startswith(("parent ", "child ")))
    return int(ids["parent"]), int(ids["child"])


def test_a_forked_child_is_followed_through_exec_and_both_exits_are_recorded(build_workload, trace_command):
    # given a parent (3 cudaMalloc) that forks a child (5 cudaLaunchKernel) which execs (7 cudaStreamSynchronize)
    exe = build_workload("cuda_fork.c")
    # when traced, the parent exiting 7 and the child 3
    run = trace_command([str(exe), "7", "3"])
    # then gpuscope exits with the traced command's status
    assert run.returncode == 7, run.stderr
    parent, child = parent_and_child(run.stdout)
    # and the fork names the child
    assert run.query("SELECT pid, handle FROM events WHERE op = 'process_fork'") == [(parent, child)]
    # and every call is recorded under the process that made it, before and after the child's exec
    per_pid = run.query("SELECT op, pid, count(*) FROM events WHERE source = 'cuda' GROUP BY op, pid ORDER BY op")
    assert per_pid == [("cudaLaunchKernel", child, 5), ("cudaMalloc", parent, 3), ("cudaStreamSynchronize", child, 7)]
    # and the child's exec is recorded, after which its comm is still the executable's
    assert run.query("SELECT pid FROM events WHERE op = 'process_exec' AND pid = ?", (child,)) == [(child,)]
    # and each process exit is recorded once, with its exit code
    exits = run.query("SELECT pid, ret, flags & 4 FROM events WHERE op = 'process_exit' ORDER BY ts_ns")
    assert exits == [(child, 3, 4), (parent, 7, 4)]
    assert session_drops(run)["dropped"] == 0


def test_the_traced_commands_exit_status_becomes_gpuscopes(build_workload, trace_command):
    # given / when a command that exits 0, then one that exits 42
    exe = build_workload("cuda_fork.c")
    ok = trace_command([str(exe), "0", "0"])
    failed = trace_command([str(exe), "42", "0"])
    # then
    assert ok.returncode == 0, ok.stderr
    assert failed.returncode == 42, failed.stderr
    assert failed.query(
        "SELECT ret FROM events WHERE op = 'process_exit' AND pid = ?", (parent_and_child(failed.stdout)[0],)
    ) == [(42,)]


def test_a_command_killed_by_a_signal_makes_gpuscope_exit_128_plus_the_signal(trace_command):
    # given / when a command that kills itself with SIGTERM (15)
    run = trace_command(["sh", "-c", "kill -TERM $$"])
    # then
    assert run.returncode == 128 + 15, run.stderr


def test_a_command_that_cannot_run_is_one_error_exit_127_and_no_recording(tmp_path, standin):
    # given a program that is not on the PATH the command gets (as `python` under sudo on Debian 12)
    db = tmp_path / "t.db"
    env = dict(standin.env(), PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    p = run_gpuscope("trace", "--db", str(db), "--no-tui", "--", "no-such-python", "train.py", env=env)
    # then the shell's status for it, one error with its fix, nothing recorded and nothing else said
    assert p.returncode == 127, p.stdout + p.stderr
    assert p.stderr.splitlines() == [
        "error: cannot run no-such-python: not found on PATH (/usr/sbin:/usr/bin:/sbin:/bin)",
        "  fix: give its full path (`command -v NAME` in your own shell prints it)",
    ], p.stderr
    assert p.stdout == ""
    assert not db.exists()
