"""Libraries mapped after tracing began are traced from their first call.

Each test copies a stand-in library into a directory made for it, which no
discovery scan knows (not on LD_LIBRARY_PATH, no rpath of the launched
command, not a wheel or conda directory of this machine), and counts the calls
recorded against the calls made. The kernel holds the process at its first
mapping of the file until the probes are attached (bpf/loads.bpf.c); the hold
tests check it is always let go: by the agent, by the kernel's time bound, and
when the agent dies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscope.agent.tracer import HOLD_MAX_S
from tests.conftest import WORKLOADS_SRC, StandinLibs, TraceRun, run_gpuscope
from tests.privileged.support import LineReader, background, gpuscope_cmd, session_drops


def fresh_copy(lib: Path, where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    dst = where / lib.name
    shutil.copy2(lib, dst)
    return dst


def compile_c(src: str, out: Path, *flags: str) -> Path:
    subprocess.run(["cc", "-O1", "-g", "-o", str(out), str(WORKLOADS_SRC / src), *flags], check=True)
    return out


def trace(tmp_path: Path, cmd: list[str], *extra: str) -> TraceRun:
    """``gpuscope trace -- CMD`` with no --lib: discovery and late loads as a user gets them."""
    db = tmp_path / "late.db"
    p = run_gpuscope("trace", "--no-tui", "--record-all", "--db", str(db), *extra, "--", *cmd, timeout=120)
    assert p.returncode == 0, p.stderr
    return TraceRun(db, p.returncode, p.stdout, p.stderr)


def calls(run: TraceRun, pid: int, op: str) -> int:
    ((n,),) = run.query("SELECT count(*) FROM events WHERE pid = ? AND op = ?", (pid, op))
    assert isinstance(n, int), n
    return n


def pids_of(stdout: str) -> list[int]:
    return [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("pid ")]


def library_paths(run: TraceRun) -> list[str]:
    ((libs,),) = run.query("SELECT libraries FROM sessions")
    return [lib["path"] for lib in json.loads(str(libs))]


def test_a_library_dlopened_from_a_new_directory_is_traced_from_its_first_call(standin: StandinLibs, tmp_path):
    # given a program linked against no CUDA library, and a libcudart copy in a directory nobody knows
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    lib = fresh_copy(standin.cudart, tmp_path / "fresh" / "lib")
    # when it dlopens the copy, makes 2,000 calls at once and exits
    run = trace(tmp_path, [str(exe), str(lib), "2000"])
    # then every call is recorded, and the copy was attached while the process was held
    (pid,) = pids_of(run.stdout)
    assert calls(run, pid, "cudaLaunchKernel") == 2000
    assert str(lib) in library_paths(run)
    drops = session_drops(run)
    assert drops["hold"] == 1
    assert drops["hold_expired"] == 0
    ((flags,),) = run.query("SELECT flags FROM sessions")
    assert json.loads(str(flags))["late_loads"] == "hold"
    # and the summary says what was attached late, and for how long the process was held
    assert f"attached after start: {lib}; 1 process(es) held at the load, longest" in run.stderr


def test_exec_descendants_with_their_own_rpath_are_traced_from_their_first_call(standin: StandinLibs, tmp_path):
    # given two NCCL ranks that find libnccl.so.2 through their own rpath, in a new directory
    libdir = tmp_path / "job" / "lib"
    fresh_copy(standin.nccl, libdir)
    exe = compile_c(
        "nccl_ranks.c", tmp_path / "job" / "ncclwork", f"-L{libdir}", "-l:libnccl.so.2", f"-Wl,-rpath,{libdir}", "-ldl"
    )
    # when a shell starts both (the issue's own example)
    script = f"RANK=0 WORLD_SIZE=2 {exe} 300 & RANK=1 WORLD_SIZE=2 {exe} 200; wait"
    run = trace(tmp_path, ["bash", "-c", script])
    # then each rank's communicator set-up and every collective is recorded
    ranks = {}
    for line in run.stdout.splitlines():
        if line.startswith("pid ") and " rank " in line:
            _, pid, _, rank = line.split()
            ranks[int(rank)] = int(pid)
    assert sorted(ranks) == [0, 1]
    assert calls(run, ranks[0], "ncclCommInitRank") == 1
    assert calls(run, ranks[1], "ncclCommInitRank") == 1
    assert calls(run, ranks[0], "ncclAllReduce") == 300
    assert calls(run, ranks[1], "ncclAllReduce") == 200
    assert session_drops(run)["hold_expired"] == 0


def test_ld_library_path_conda_and_venv_copies_of_descendants_are_traced_from_their_first_call(
    standin: StandinLibs, tmp_path
):
    # given a conda-like env lib directory found through LD_LIBRARY_PATH set inside the job,
    conda_lib = fresh_copy(standin.cudart, tmp_path / "conda" / "envs" / "train" / "lib").parent
    hammer = compile_c("cuda_hammer.c", tmp_path / "hammer", f"-L{conda_lib}", "-l:libcudart.so.12", "-lpthread")
    # and a wheel copy inside a virtualenv made for the job, loaded by Python through ctypes
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    wheel_lib = fresh_copy(standin.cudart, site / "nvidia" / "cuda_runtime" / "lib")
    script = (
        f"LD_LIBRARY_PATH={conda_lib} {hammer} 700 1; "
        f"{sys.executable} {WORKLOADS_SRC / 'ctypes_malloc.py'} {wheel_lib} 50"
    )
    # when the job runs both, one after the other
    run = trace(tmp_path, ["bash", "-c", script])
    # then both copies are traced from their first call
    assert "calls 700" in run.stdout
    ((n_launch,),) = run.query("SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel' AND comm = 'hammer'")
    assert n_launch == 700
    (py_pid,) = pids_of(run.stdout)
    assert calls(run, py_pid, "cudaMalloc") == 50
    paths = library_paths(run)
    assert str(conda_lib / "libcudart.so.12") in paths
    assert str(wheel_lib) in paths


def test_processes_that_map_no_cuda_library_are_never_held(standin: StandinLibs, tmp_path):
    # given a job that runs programs mapping many other libraries, then one CUDA program
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    lib = fresh_copy(standin.cudart, tmp_path / "fresh")
    script = (
        f"{sys.executable} -c 'import json, sqlite3, ssl, ctypes, decimal'; ls / >/dev/null; "
        f"cc --version >/dev/null; {exe} {lib} 10"
    )
    run = trace(tmp_path, ["bash", "-c", script])
    # then only the CUDA load was held
    assert session_drops(run)["hold"] == 1


def start_system_wide(db: Path) -> tuple[subprocess.Popen[str], LineReader]:
    proc = subprocess.Popen(
        gpuscope_cmd("trace", "--no-tui", "--record-all", "--db", str(db), "-d", "60s"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = LineReader(proc.stdout)
    # The first once-a-second line: the agent is in its loop, with its stop signals handled.
    out.wait_for(lambda line: line.startswith("[") and "events" in line, timeout=60)
    return proc, out


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def wait_for_state(pid: int, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state_of(pid) == state:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never reached state {state} (is {state_of(pid)})")


def test_system_wide_trace_follows_a_process_started_later_from_its_first_call(standin: StandinLibs, tmp_path):
    # given a system-wide trace (no command, no pid) already running
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    db = tmp_path / "system.db"
    agent, out = start_system_wide(db)
    try:
        # when a new process loads libcudart from a new directory and calls it 2,000 times
        lib = fresh_copy(standin.cudart, tmp_path / "later")
        done = subprocess.run([str(exe), str(lib), "2000"], capture_output=True, text=True, timeout=30, check=True)
        (pid,) = pids_of(done.stdout)
    finally:
        agent.send_signal(signal.SIGINT)
        out.rest(60)
        assert agent.wait(timeout=60) == 0, "".join(out.lines)
    # then all of them are recorded
    run = TraceRun(db, 0, "", "")
    assert calls(run, pid, "cudaLaunchKernel") == 2000


@pytest.fixture
def held_workload(standin: StandinLibs, tmp_path):
    """A system-wide agent that cannot run (SIGSTOP), and a process the kernel holds for it."""
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    lib = fresh_copy(standin.cudart, tmp_path / "held")
    db = tmp_path / "held.db"
    agent, out = start_system_wide(db)
    try:
        os.kill(agent.pid, signal.SIGSTOP)
        with background([str(exe), str(lib), "100"], stdout=subprocess.PIPE) as work:
            wait_for_state(work.pid, "T", timeout=10)
            yield agent, work, db
    finally:
        if agent.poll() is None:
            os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=30)
        out.rest(10)


def test_a_held_process_is_let_go_when_the_agent_dies(held_workload):
    agent, work, _ = held_workload
    # when the agent is killed while the process waits for it
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(timeout=30)
    # then the process runs on at once (well before the kernel's own time bound) and finishes
    assert work.wait(timeout=HOLD_MAX_S / 2) == 0


def test_a_held_process_is_let_go_after_the_time_bound_when_the_agent_cannot_run(held_workload):
    agent, work, db = held_workload
    # when the agent stays stopped, the kernel resumes the process on its own
    assert work.wait(timeout=HOLD_MAX_S + 5) == 0
    assert agent.poll() is None and state_of(agent.pid) == "T"
    # and the agent, once it runs again, records that the bound was hit
    os.kill(agent.pid, signal.SIGCONT)
    agent.send_signal(signal.SIGINT)
    assert agent.wait(timeout=60) == 0
    run = TraceRun(db, 0, "", "")
    assert session_drops(run)["hold_expired"] >= 1


def test_a_job_of_an_interactive_shell_is_not_stopped_and_its_library_is_still_attached(standin: StandinLibs, tmp_path):
    # given an interactive shell with job control, in a terminal, traced
    from tests.privileged.test_tui_pty import Tmux

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    lib = fresh_copy(standin.cudart, tmp_path / "job")
    db = tmp_path / "tty.db"
    term = Tmux()
    try:
        term.start(
            " ".join(gpuscope_cmd("trace", "--no-tui", "--db", str(db), "--", "bash", "--norc", "--noprofile", "-i"))
        )
        term.wait_for(lambda screen: "Hit Ctrl-C to end." in screen, timeout=60)
        # when the shell runs a CUDA program as its foreground job (which lives on for a second)
        term.tmux("send-keys", "-t", "t", f"{exe} {lib} 2000 1; exit", "Enter")
        screen = term.wait_for(lambda screen: "EXIT=" in screen, timeout=60)
    finally:
        term.kill()
    # then the job was not stopped (a stop would make the shell report it and take the terminal back)
    assert "calls 2000" in screen
    assert "Stopped" not in screen
    assert "EXIT=0" in screen
    run = TraceRun(db, 0, "", "")
    assert session_drops(run)["hold"] == 0
    # and its library was attached all the same, as soon as it was seen (its first calls may be
    # missed: that is the price of not stopping a terminal's job)
    assert str(lib) in library_paths(run)


def test_no_hold_attaches_without_stopping_anyone(standin: StandinLibs, tmp_path):
    # given a program that loads a library from a new directory and lives on for a second
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    lib = fresh_copy(standin.cudart, tmp_path / "nohold")
    # when it is traced with --no-hold
    run = trace(tmp_path, [str(exe), str(lib), "10", "1"], "--no-hold")
    # then nothing was held, and the library was attached all the same
    assert session_drops(run)["hold"] == 0
    assert str(lib) in library_paths(run)
    ((flags,),) = run.query("SELECT flags FROM sessions")
    assert json.loads(str(flags))["late_loads"] == "attach"


def test_a_command_gets_probes_only_on_the_copies_of_a_library_it_loads(standin: StandinLibs, tmp_path: Path) -> None:
    # given two libcudart copies that discovery finds at start (on LD_LIBRARY_PATH), and a program that loads one
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    used = fresh_copy(standin.cudart, tmp_path / "used")
    unused = fresh_copy(standin.cudart, tmp_path / "unused")
    env = {**os.environ, "LD_LIBRARY_PATH": f"{used.parent}:{unused.parent}"}
    db = tmp_path / "defer.db"
    # when it makes 2,000 calls at once through the copy it loads
    p = run_gpuscope("trace", "--no-tui", "--record-all", "--db", str(db), "--", str(exe), str(used), "2000", env=env)
    assert p.returncode == 0, p.stderr
    run = TraceRun(db, p.returncode, p.stdout, p.stderr)
    # then the header names both copies, each to be attached at its first load
    for lib in (used, unused):
        assert f"{lib} " in p.stderr and "attached at its first load" in p.stderr
    # and every call was recorded through the copy it loaded (held once for it), the other copy never probed
    (pid,) = pids_of(run.stdout)
    assert calls(run, pid, "cudaLaunchKernel") == 2000
    assert library_paths(run) == [str(used)]
    assert session_drops(run)["hold"] == 1


def test_a_command_that_loads_no_cuda_library_attaches_no_probe(standin: StandinLibs, tmp_path: Path) -> None:
    # given a copy of libcudart that discovery finds at start
    lib = fresh_copy(standin.cudart, tmp_path / "found")
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent)}
    db = tmp_path / "none.db"
    # when a command that loads no CUDA library is traced
    p = run_gpuscope("trace", "--no-tui", "--db", str(db), "--", "true", env=env)
    # then no library was attached (nothing to detach at the end) and nothing was held
    assert p.returncode == 0, p.stderr
    run = TraceRun(db, p.returncode, p.stdout, p.stderr)
    assert library_paths(run) == []
    assert session_drops(run)["hold"] == 0


def test_a_trace_that_finds_no_cuda_library_at_start_waits_for_one_and_traces_it_from_its_first_call(
    standin: StandinLibs, tmp_path: Path
) -> None:
    # given a machine view without any CUDA library discovery would find (each folder it finds one in is hidden
    # under an empty tmpfs, in a mount namespace of the test's own), and a program that dlopens a fresh copy
    from gpuscope.agent.discovery import Discovery

    found = Discovery()
    found.scan_system(dict(os.environ))
    hidden = sorted({os.path.dirname(p) for lib in found.libraries for p in (lib.path, os.path.realpath(lib.path))})
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    lib = fresh_copy(standin.cudart, tmp_path / "fresh")
    db = tmp_path / "late.db"
    script = "".join(f"mount -t tmpfs none '{d}' && " for d in hidden) + " ".join(
        [*gpuscope_cmd("trace", "--no-tui", "--record-all", "--db", str(db), "--", str(exe), str(lib), "2000")]
    )
    # when it is traced
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # then the trace starts without a library, says so, and records every call once the copy is loaded
    assert p.returncode == 0, p.stderr
    assert "no CUDA library found yet" in p.stderr
    run = TraceRun(db, p.returncode, p.stdout, p.stderr)
    (pid,) = pids_of(run.stdout)
    assert calls(run, pid, "cudaLaunchKernel") == 2000
    assert library_paths(run) == [str(lib)]


def test_a_system_wide_trace_finds_the_library_of_a_job_already_running_from_a_folder_nobody_knows(
    build_workload, standin: StandinLibs, tmp_path: Path
) -> None:
    # given a job already running before the trace starts, calling a libcudart from a folder no search path names
    libdir = tmp_path / "env" / "lib"
    fresh_copy(standin.cudart, libdir)
    fresh_copy(standin.cuda, libdir)
    exe = compile_c(
        "cuda_loop.c", tmp_path / "job", f"-L{libdir}", "-l:libcudart.so.12", "-l:libcuda.so.1", f"-Wl,-rpath,{libdir}"
    )
    with background([str(exe), "60"], stdout=subprocess.PIPE) as job:
        LineReader(job.stdout).wait_for(lambda line: line.strip() == "ready", timeout=30)
        # when a system-wide trace runs for 2 s
        db = tmp_path / "all.db"
        p = run_gpuscope("trace", "--no-tui", "--duration", "2s", "--db", str(db), timeout=120)
        run = TraceRun(db, p.returncode, p.stdout, p.stderr)
        assert run.returncode == 0, run.stderr
    # then the library it mapped was found in its memory map and its calls are recorded
    assert str(libdir / "libcudart.so.12") in library_paths(run)
    assert calls(run, job.pid, "cudaLaunchKernel") >= 20


def test_a_second_agent_knows_the_first_and_never_traces_every_process_twice(standin: StandinLibs, tmp_path):
    # given a system-wide trace (every process) already running
    proc, _ = start_system_wide(tmp_path / "first.db")
    try:
        # when a second system-wide trace starts: refused at once, naming the first and its recording
        again = run_gpuscope("trace", "--no-tui", "--db", str(tmp_path / "second.db"), "-d", "1s", timeout=60)
        assert again.returncode == 2, again.stderr
        assert f"another gpuscope agent (pid {proc.pid}) already traces every process" in again.stderr
        assert str(tmp_path / "first.db") in again.stderr and "--alongside" in again.stderr
        assert not (tmp_path / "second.db").exists()
        # and a trace of one command runs, its header saying who else probes its calls
        one = run_gpuscope(
            "trace", "--no-tui", "--db", str(tmp_path / "third.db"), "--", "true", env=standin.env(), timeout=60
        )
        assert one.returncode == 0, one.stderr
        assert f"also tracing this host: gpuscope pid {proc.pid} (every process" in one.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    # and once the first has ended, a system-wide trace is no one's second
    alone = run_gpuscope("trace", "--no-tui", "--db", str(tmp_path / "fourth.db"), "-d", "1s", timeout=60)
    assert alone.returncode == 0, alone.stderr
    assert "also tracing this host" not in alone.stderr
