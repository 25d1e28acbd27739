"""On-CPU samples of traced threads: the code that holds the host while the GPU waits, named.

A real Python loop builds each batch in pure Python and then feeds the
stand-in libcudart; the kernel's cpu-clock samples its stacks (native and
Python frames), and explain, ``stacks --cpu`` and the profile exports name
``build_batch`` with its file and line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import StandinLibs, TraceRun, run_gpuscope
from tests.privileged.support import json_line

WORKLOAD = Path(__file__).resolve().parent.parent / "workloads" / "py_host_bound.py"


def _trace_loop(trace_command, standin: StandinLibs, seconds: str, *extra: str) -> TraceRun:
    env = standin.env()
    # The GPU's share of a step: a 2 ms synchronisation after 40 launches.
    env["GPUSCOPE_STANDIN_LATENCY"] = "cudaDeviceSynchronize=2ms:sleep"
    run: TraceRun = trace_command(
        [sys.executable, str(WORKLOAD), str(standin.cudart), seconds], env=env, extra=["--no-tui", *extra]
    )
    assert run.returncode == 0, run.stderr
    return run


def test_starvation_names_the_python_function_that_holds_the_host(trace_command, standin) -> None:
    # given a loop that spends most of each step in build_batch, traced with the defaults
    run = _trace_loop(trace_command, standin, "6")
    pid = json_line(run.stdout)["pid"]
    # then the loop's threads were sampled at the default rate, with Python frames
    assert run.query("SELECT DISTINCT pid FROM cpu_samples") == [(pid,)]
    (flags,) = run.query("SELECT flags FROM sessions")[0]
    assert json.loads(str(flags))["cpu_sample_hz"] == 49
    # when explained
    p = run_gpuscope("explain", "--db", str(run.db), "--json")
    assert p.returncode == 0, p.stderr
    findings = json.loads(p.stdout)["findings"]
    (starved,) = [f for f in findings if f["kind"] == "data-starvation" and f["symptom"]["pid"] == pid]
    # then the finding says where the host time goes: build_batch, with its file and line, most of the samples
    (host,) = [c for c in starved["causes"] if c["kind"] == "host-time"]
    assert "`build_batch` (py_host_bound.py:" in host["evidence"][0], host
    assert host["effect"]["host_top_share"] >= 0.5
    assert host["effect"]["host_feeder_share"] >= 0.9
    # and the fix is for that code
    assert "`build_batch` (py_host_bound.py:" in starved["fix"]


def test_the_profile_is_shown_and_exported_for_flame_graph_viewers(trace_command, standin, tmp_path: Path) -> None:
    run = _trace_loop(trace_command, standin, "3")
    # stacks --cpu: the top function first, its share, file and line
    p = run_gpuscope("stacks", "--cpu", "--db", str(run.db), "--limit", "3")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "on-CPU samples at 49 a second" in lines[0] and "(estimated)" in lines[0]
    assert "`build_batch` (py_host_bound.py:" in lines[3], p.stdout
    # speedscope: one sampled profile per thread, a frame per function, weights in samples
    out = tmp_path / "profile.speedscope.json"
    p = run_gpuscope("export", "--db", str(run.db), "--format", "speedscope", "-o", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    (prof,) = doc["profiles"]
    assert prof["type"] == "sampled" and prof["unit"] == "none"
    assert len(prof["samples"]) == len(prof["weights"]) and sum(prof["weights"]) == prof["endValue"]
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert "build_batch" in names and "<module>" in names
    # the root of every sample is the outermost frame (speedscope reads root first)
    assert all(names[s[0]] == "<module>" for s in prof["samples"] if names[s[-1]] == "build_batch")
    # folded: "process;thread;...;innermost count", counts adding up to the samples
    p = run_gpuscope("export", "--db", str(run.db), "--format", "folded", "-o", "-")
    assert p.returncode == 0, p.stderr
    folded = [line.rsplit(" ", 1) for line in p.stdout.splitlines()]
    assert sum(int(n) for _, n in folded) == sum(prof["weights"])
    assert any(stack.endswith(";<module>;main;build_batch") for stack, _ in folded)


def test_a_process_that_exits_at_once_still_has_its_python_frames_named(trace_command, standin) -> None:
    # given a Python process that computes for a moment and exits before any CUDA call
    code = "def spin():\n    s = 0\n    for i in range(6_000_000):\n        s += i\n    return s\nspin()\n"
    run: TraceRun = trace_command([sys.executable, "-c", code], extra=["--no-tui"])
    assert run.returncode == 0, run.stderr
    # then its samples resolve to the Python function, read from the code objects the kernel described
    p = run_gpuscope("stacks", "--cpu", "--db", str(run.db), "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert rows and rows[0]["function"] == "spin" and rows[0]["file"] == "<string>", rows


def test_sampling_can_be_turned_off(trace_command, standin) -> None:
    run = _trace_loop(trace_command, standin, "1", "--cpu-samples", "off")
    assert run.query("SELECT count(*) FROM cpu_samples") == [(0,)]
    (flags,) = run.query("SELECT flags FROM sessions")[0]
    assert json.loads(str(flags))["cpu_sample_hz"] == 0


def test_a_bad_rate_is_one_line_and_nothing_is_recorded(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    p = run_gpuscope("trace", "--db", str(db), "--cpu-samples", "5000", "--", "true")
    assert p.returncode == 2 and "--cpu-samples 5000: from 1 to 999" in p.stderr
    assert "Traceback" not in p.stderr and not db.exists()


def test_starvation_and_its_code_are_found_with_record_all_too(trace_command, standin) -> None:
    run = _trace_loop(trace_command, standin, "4", "--record-all")
    p = run_gpuscope("explain", "--db", str(run.db), "--json")
    assert p.returncode == 0, p.stderr
    (starved,) = [f for f in json.loads(p.stdout)["findings"] if f["kind"] == "data-starvation"]
    assert any(
        "`build_batch` (py_host_bound.py:" in c["evidence"][0] for c in starved["causes"] if c["kind"] == "host-time"
    )
