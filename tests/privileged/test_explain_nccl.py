"""Explain rules on real traces: an NCCL straggler and its cause, a hang reported live,
graph re-capture, and a noisy neighbour named by its container."""

from __future__ import annotations

import json
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuscope.analysis.engine import ExplainOptions, Report, explain_db

from .support import LineReader, gpuscope_cmd
from .test_coverage_host import V2_ROOT, cgroup_dirs

HOG = "while True: pass"


def _explain(db: Path) -> Report:
    return explain_db(db, ExplainOptions())  # loads ranks and communicators itself


def _ranks(stdout: str) -> dict[int, int]:
    """rank -> pid, from the "pid P rank R" lines of nccl_ranks."""
    return {int(m.group(2)): int(m.group(1)) for m in re.finditer(r"pid (\d+) rank (\d+)", stdout)}


def test_a_rank_slowed_by_a_cpu_hog_on_its_core_is_the_nccl_straggler_with_the_hog_named(
    build_workload, trace_command, standin
):
    # given three ranks spinning 500 µs in each allreduce; ranks 0 and 1 share CPU 1, rank 2 shares CPU 0
    # with a busy loop of higher priority (nice -10: rank 2 gets about a tenth of its CPU, so other load
    # on this machine is small beside the hog)
    exe = build_workload("nccl_ranks.c")
    hog = subprocess.Popen(["nice", "-n", "-10", "taskset", "-c", "0", sys.executable, "-c", HOG])
    try:
        script = (
            " & ".join(f"RANK={r} WORLD_SIZE=3 taskset -c {0 if r == 2 else 1} {exe} 300" for r in range(3)) + " & wait"
        )
        run = trace_command(["/bin/sh", "-c", script], libs=[standin.nccl], env=standin.env(ncclAllReduce="500us"))
    finally:
        hog.kill()
        hog.wait(timeout=10)
    assert run.returncode == 0, run.stderr
    ranks = _ranks(run.stdout)
    # when
    report = _explain(run.db)
    # then
    found = [f for f in report.findings if f.kind == "nccl-straggler"]
    assert len(found) == 1, [(f.kind, f.symptom.summary) for f in report.findings]
    f = found[0]
    assert f.symptom.extra["rank"] == 2 and f.symptom.pid == ranks[2]
    cause = f.causes[1]
    assert cause.kind == "cpu-preemption", cause.evidence
    assert hog.pid in {c.pid for c in cause.culprits}


def test_a_rank_that_never_returns_is_reported_as_nccl_hang_while_tracing_runs(build_workload, standin, tmp_path: Path):
    # given three ranks, rank 2's last allreduce blocking for 20 s, traced with a 2 s hang threshold
    exe = build_workload("nccl_ranks.c")
    script = " & ".join(f"RANK={r} WORLD_SIZE=3 HANG_RANK=2 HANG_SECONDS=20 {exe} 30" for r in range(3)) + " & wait"
    cmd = gpuscope_cmd(
        "trace",
        "--json",
        "-o",
        "-",  # the stream shares stdout with the ranks, whose "pid P rank R" lines the test reads too
        "--db",
        str(tmp_path / "hang.db"),
        "--lib",
        str(standin.nccl),
        "--hang-threshold",
        "2s",
        "--",
        "/bin/sh",
        "-c",
        script,
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=standin.env())
    out = LineReader(proc.stdout)
    started = time.monotonic()
    try:
        # when: read the live intervals until one carries the finding (bounded)
        line = out.wait_for(lambda s: s.startswith("{") and "nccl-hang" in s, timeout=25)
        elapsed = time.monotonic() - started
        # then: reported live, CRITICAL, naming rank 2, while the rank is still stuck
        interval = json.loads(line)
        assert interval["type"] == "interval"
        hang = next(x for x in interval["findings"] if "nccl-hang" in x)
        assert hang.startswith("CRITICAL nccl-hang: rank 2"), hang
        ranks = _ranks("".join(out.lines))
        assert f"pid {ranks[2]}" in hang
        assert elapsed < 20 and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in _ranks("".join(out.lines)).values():  # the hung rank outlives its shell
                subprocess.run(["kill", "-9", str(pid)], stderr=subprocess.DEVNULL, check=False)


def test_graphs_recaptured_after_replay_started_are_graph_recapture(build_workload, trace_command):
    exe = build_workload("graphs.c")
    run = trace_command([str(exe), "25", "5"])
    assert run.returncode == 0, run.stderr
    found = [f for f in _explain(run.db).findings if f.kind == "graph-recapture"]
    assert len(found) == 1
    # 5 runtime re-captures and the driver capture at the end, all after the first launch
    assert found[0].symptom.extra["recaptures"] == 6


def test_a_cpu_hog_in_another_container_is_the_named_noisy_neighbour(
    build_workload, trace_command, standin, tmp_path: Path
):
    # given the workload in docker container A and a busy loop of higher priority in docker container B,
    # on the same CPU
    cid_a, cid_b = secrets.token_hex(32), secrets.token_hex(32)
    a = V2_ROOT / f"system.slice/docker-{cid_a}.scope"
    b = V2_ROOT / f"system.slice/docker-{cid_b}.scope"
    exe = build_workload("explain_scenarios.c")
    script = (
        f"sh -c 'echo $$ > {b}/cgroup.procs; exec nice -n -10 taskset -c 0 {sys.executable} -c \"{HOG}\"' & H=$!; "
        f"sh -c 'echo $$ > {a}/cgroup.procs; exec taskset -c 0 {exe} sync 150'; kill $H; wait"
    )
    with cgroup_dirs(a, b):
        run = trace_command(["/bin/sh", "-c", script], env=standin.env(cudaStreamSynchronize="2ms"))
    assert run.returncode == 0, run.stderr
    # when: the CLI, as a user runs it
    p = subprocess.run(
        gpuscope_cmd("explain", "--db", str(run.db), "--json"), capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    findings = json.loads(p.stdout)["findings"]
    # then
    noisy = [f for f in findings if f["kind"] == "noisy-neighbour"]
    assert noisy, [f["kind"] for f in findings]
    sym = noisy[0]["symptom"]
    assert sym["neighbour_container_id"] == cid_b
    assert sym["container"] == f"docker container {cid_a[:12]}"
    assert cid_b[:12] in sym["summary"]
