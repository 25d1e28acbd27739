"""The overhead budget on real uprobes: a host-bound loop traced in the default mode, against its exact counts.

The loop (tests/workloads/host_loop.c) makes 1,000 calls a step (80 % launches, 10 % async copies, 10 %
memsets) with 10 µs of CPU work before each, then one sync, and prints how many calls of each it made.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

LOOP_S = 7
# Counts of sampled ops are estimates; on a steady loop they stay within this of the calls made.
COUNT_TOLERANCE = 0.05


def _made(stdout: str) -> dict[str, int]:
    m = dict(re.findall(r"(\w+)=(\d+)", stdout))
    return {
        "cudaLaunchKernel": int(m["launches"]),
        "cudaMemcpyAsync": int(m["memcpy_async"]),
        "cudaMemsetAsync": int(m["memset_async"]),
        "cudaStreamSynchronize": int(m["syncs"]),
    }


def _explain(db: str) -> dict[str, object]:
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "explain", "--db", db, "--json"], capture_output=True, text=True, check=False
    )
    assert p.returncode == 0, p.stderr
    doc: dict[str, object] = json.loads(p.stdout)
    return doc


def _stats(doc: dict[str, object]) -> dict[str, dict[str, object]]:
    stats = doc["stats"]
    assert isinstance(stats, list)
    return {str(s["op"]): s for s in stats}


def test_the_default_mode_probes_launches_in_windows_and_estimates_their_counts_within_5_percent(
    build_workload, trace_command
):
    # given a host-bound loop of 7 s, traced in the default mode with 1 s probed whole at its start
    exe = build_workload("host_loop.c")
    run = trace_command(["taskset", "-c", "1", str(exe), str(LOOP_S)], extra=["--keep-first", "1s", "--no-tui"])
    assert run.returncode == 0, run.stderr
    made = _made(run.stdout)
    # then the launches, copies and memsets were probed in windows that covered a small share of the time
    windows = run.query("SELECT start_ns, end_ns FROM probe_windows ORDER BY start_ns")
    assert len(windows) >= 4, windows
    covered = sum(int(str(e)) - int(str(s)) for s, e in windows)
    span = int(str(windows[-1][1])) - int(str(windows[0][0]))
    assert covered < 0.6 * span, (covered, span)
    # and the rows of those ops are fewer than the calls made (only the windows' calls were seen)
    seen = run.op_counts()
    assert seen["cudaLaunchKernel"] < 0.6 * made["cudaLaunchKernel"]
    # and explain estimates them within 5 %, labelled as estimates, while the sync count is exact
    doc = _explain(str(run.db))
    stats = _stats(doc)
    for op in ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync"):
        s = stats[op]
        assert s["estimated"] is True, s
        assert 0 < float(str(s["coverage"])) < 1, s
        assert abs(int(str(s["count"])) - made[op]) <= COUNT_TOLERANCE * made[op], (op, s["count"], made[op])
    sync = stats["cudaStreamSynchronize"]
    assert "estimated" not in sync and sync["count"] == made["cudaStreamSynchronize"]
    # and gpuscope's own cost was measured per process, against the budget
    sampling = doc["sampling"]
    assert isinstance(sampling, dict) and sampling["budget"] == 0.01
    costs = sampling["self_cost"]
    assert isinstance(costs, list) and len(costs) == 1
    assert costs[0]["probe_ns"] > 0 and costs[0]["cpu_ns"] > 0
    assert costs[0]["budgeted_share"] is not None and costs[0]["budgeted_share"] < 0.03, costs
    # and the text report marks the estimates
    text = subprocess.run(
        [sys.executable, "-m", "gpuscope", "explain", "--db", str(run.db)], capture_output=True, text=True, check=False
    ).stdout
    assert f"≈{stats['cudaLaunchKernel']['count']:,}" in text
    assert "≈ estimated: " in text and "gpuscope's own cost (measured): " in text


@pytest.mark.parametrize("flag", [["--record-all"], ["--budget", "off"]])
def test_the_exact_modes_probe_every_call_and_still_measure_their_cost(build_workload, trace_command, flag):
    # given the same loop, shorter, traced with every call probed
    exe = build_workload("host_loop.c")
    run = trace_command(["taskset", "-c", "1", str(exe), "3"], extra=[*flag, "--keep-first", "1s", "--no-tui"])
    assert run.returncode == 0, run.stderr
    made = _made(run.stdout)
    # then there are no windows and every count is exact and not marked estimated
    assert run.query("SELECT count(*) FROM probe_windows") == [(0,)]
    stats = _stats(_explain(str(run.db)))
    for op, n in made.items():
        assert stats[op]["count"] == n, (op, stats[op], n)
        assert "estimated" not in stats[op]
    # and the cost was measured all the same
    assert run.query("SELECT count(*) > 0, sum(probe_ns) > 0 FROM self_cost") == [(1, 1)]


def test_a_budget_out_of_range_is_refused_before_tracing(trace_command, build_workload):
    exe = build_workload("host_loop.c")
    run = trace_command([str(exe), "1"], extra=["--budget", "80%"])
    assert run.returncode == 2
    assert "--budget 80%" in run.stderr and "Traceback" not in run.stderr


def test_a_trace_shorter_than_its_first_seconds_is_one_exact_window_and_its_counts_are_not_estimates(
    build_workload, trace_command
):
    # given a loop that ends long before the first 10 s (probed whole) are over, traced in the default mode
    exe = build_workload("host_loop.c")
    run = trace_command([str(exe), "0.3"], extra=["--no-tui"])
    assert run.returncode == 0, run.stderr
    made = _made(run.stdout)
    # then its whole run is one window of the first seconds, recorded although the trace ended first
    windows = run.query("SELECT start_ns, end_ns, exact FROM probe_windows")
    assert len(windows) == 1 and windows[0][2] == 1, windows
    (start, end), (first, last) = (
        windows[0][:2],
        run.query("SELECT min(ts_ns), max(ts_ns) FROM events WHERE source = 'cuda'")[0],
    )
    assert int(str(start)) <= int(str(first)) and int(str(end)) >= int(str(last))
    # and every count is exact, none marked as an estimate
    stats = _stats(_explain(str(run.db)))
    for op, n in made.items():
        assert stats[op]["count"] == n and "estimated" not in stats[op], (op, stats[op], n)
