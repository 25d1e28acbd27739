"""The capabilities the deployment files grant are enough to trace, and each one tested here is needed.

The agent runs as the DaemonSet runs it: uid 0 with every capability dropped
but those the manifest adds (setpriv's bounding set, no new privileges). It
traces a process of another user, which loads a stand-in libcudart after the
trace started, from a folder only that user may enter: the late load asks
for CAP_KILL (the process is held, where the kernel can), the folder for
CAP_DAC_READ_SEARCH, the process's /proc entries for CAP_SYS_PTRACE.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import WORKLOADS_SRC, StandinLibs, TraceRun, _cc
from tests.privileged.support import LineReader

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "daemonset.yaml"
WORKLOAD_UID = 4242  # a user of its own: neither the agent's nor anyone's on the machine
CALLS = 500


def daemonset_capabilities() -> list[str]:
    daemonset = next(d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return list(container["securityContext"]["capabilities"]["add"])


@pytest.fixture
def stage(standin: StandinLibs) -> Iterator[Path]:
    """A folder all users can enter: the workload, a public libcudart, and a private one of WORKLOAD_UID.

    Under the run's temporary directory (world-searchable), not pytest's
    (private to root): the workload's user must reach its program.
    """
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    base = Path(tempfile.mkdtemp(prefix="deploy-caps-"))
    try:
        base.chmod(0o755)
        subprocess.run(
            [_cc(), "-O1", "-o", str(base / "dlopen_calls"), str(WORKLOADS_SRC / "dlopen_calls.c"), "-ldl"], check=True
        )
        (base / "public").mkdir(mode=0o755)
        shutil.copy2(standin.cudart, base / "public" / standin.cudart.name)
        private = base / "private"
        private.mkdir(mode=0o700)
        shutil.copy2(standin.cudart, private / standin.cudart.name)
        for p in (private, private / standin.cudart.name):
            os.chown(p, WORKLOAD_UID, WORKLOAD_UID)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def trace_with_only(capabilities: list[str], stage: Path, db: Path) -> tuple[TraceRun, int, str]:
    """Trace the workload with an agent that has only ``capabilities``; (run, workload pid, the library it loaded)."""
    library = str(stage / "private" / "libcudart.so.12")
    # the workload: its own user and session; it waits for a line, then becomes dlopen_calls (same pid)
    workload = subprocess.Popen(
        ["setpriv", f"--reuid={WORKLOAD_UID}", f"--regid={WORKLOAD_UID}", "--clear-groups", "sh", "-c",
         f'echo "pid $$"; read go; exec {stage / "dlopen_calls"} {library} {CALLS}'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert workload.stdout is not None and workload.stdin is not None
    pid = int(workload.stdout.readline().split()[1])
    caps = ",".join(["-all", *(f"+{c.lower()}" for c in capabilities)])
    env = dict(os.environ, LD_LIBRARY_PATH=str(stage / "public"))
    agent = subprocess.Popen(
        ["setpriv", f"--bounding-set={caps}", "--inh-caps=-all", "--no-new-privs",
         sys.executable, "-m", "gpuscope", "trace", "--no-tui", "--db", str(db), "--pid", str(pid)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        log = LineReader(agent.stderr)
        try:
            first = log.wait_for(lambda line: "Hit Ctrl-C to end." in line or line.startswith("error:"), timeout=60)
        finally:
            workload.stdin.write("go\n")
            workload.stdin.close()
        workload.wait(timeout=60)
        if "Hit Ctrl-C" in first:  # tracing: stopped as a user stops it; else it is exiting on its error
            agent.send_signal(signal.SIGINT)
        agent.wait(timeout=60)
        return TraceRun(db, agent.returncode, "", log.rest(10)), pid, library
    finally:
        for p in (agent, workload):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_the_daemonsets_capabilities_trace_another_users_process_and_the_library_it_loads_later(
    stage: Path, tmp_path: Path
) -> None:
    # given an agent with the DaemonSet's capabilities and no other
    run, pid, library = trace_with_only(daemonset_capabilities(), stage, tmp_path / "all.db")

    # then the library the workload loaded from its private folder was attached, and every call recorded
    assert run.returncode == 0, run.stderr
    assert f"attached after start: {library}" in run.stderr
    ((calls,),) = run.query("SELECT count(*) FROM events WHERE pid = ? AND op = 'cudaLaunchKernel'", (pid,))
    assert calls == CALLS
    # and the process's program was read from /proc
    ((exe,),) = run.query("SELECT exe FROM processes WHERE pid = ?", (pid,))
    assert exe


def test_without_cap_dac_read_search_a_library_in_a_private_folder_is_not_traced(stage: Path, tmp_path: Path) -> None:
    capabilities = [c for c in daemonset_capabilities() if c != "DAC_READ_SEARCH"]
    run, pid, library = trace_with_only(capabilities, stage, tmp_path / "no-dac.db")
    assert run.returncode == 0, run.stderr
    assert f"attached after start: {library}" not in run.stderr
    ((calls,),) = run.query("SELECT count(*) FROM events WHERE pid = ? AND op = 'cudaLaunchKernel'", (pid,))
    assert calls == 0


def test_without_cap_sys_ptrace_another_users_program_is_unknown(stage: Path, tmp_path: Path) -> None:
    capabilities = [c for c in daemonset_capabilities() if c != "SYS_PTRACE"]
    run, pid, _ = trace_with_only(capabilities, stage, tmp_path / "no-ptrace.db")
    assert run.returncode == 0, run.stderr
    ((exe,),) = run.query("SELECT exe FROM processes WHERE pid = ?", (pid,))
    assert not exe


def test_without_cap_bpf_nothing_is_loaded_and_trace_says_so(stage: Path, tmp_path: Path) -> None:
    capabilities = [c for c in daemonset_capabilities() if c != "BPF"]
    run, _, _ = trace_with_only(capabilities, stage, tmp_path / "no-bpf.db")
    assert run.returncode == 3, run.stderr
    assert "CAP_BPF" in run.stderr
