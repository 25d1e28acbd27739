"""The end-of-run summary of `gpuscope trace`."""

from __future__ import annotations

import numpy as np

from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from gpuscope.render.summary import render_summary

MS = 1_000_000


def _hist(*durations: int) -> LatencyHistogram:
    h = LatencyHistogram.empty()
    h.add(np.array(durations, dtype=np.int64))
    return h


def _row(text: str, op: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [op])


def test_latency_columns_are_shown_only_for_durations_that_are_latencies() -> None:
    text = render_summary(
        {
            int(Op.cudaMalloc): _hist(2 * MS, 2 * MS),
            int(Op.block_io): _hist(3 * MS),
            int(Op.sched_switch): _hist(5 * MS),
            int(Op.mm_page_alloc): _hist(1000 * MS, 1000 * MS),  # aggregated per 1 s interval
            int(Op.process_exit): _hist(0),
        },
        elapsed_s=2.0,
        counters={},
    )
    assert _row(text, "cudaMalloc")[1:3] == ["2", "2.0"]
    assert _row(text, "block_io")[2] == "3.0"
    assert _row(text, "sched_switch")[2] == "5.0"
    # page allocations are counts over an interval and exits are instants: no p50/p95/p99/max
    assert _row(text, "mm_page_alloc") == ["mm_page_alloc", "2", "—", "—", "—", "—"]
    assert _row(text, "process_exit") == ["process_exit", "1", "—", "—", "—", "—"]


def test_lost_call_stacks_and_samples_are_said_with_how_to_lose_fewer() -> None:
    text = render_summary(
        {int(Op.cudaMalloc): _hist(2 * MS)},
        elapsed_s=1.0,
        counters={"drop_stack": 756, "drop_cpu_sample": 22},
        stacks_unattributed=374,
    )
    line = next(x for x in text.splitlines() if x.startswith("call stacks:"))
    assert "756 lost" in line and "374 stored calls without one" in line and "22 on-CPU samples lost" in line
    assert "--stack-every" in line and "--cpu-samples" in line


def test_no_stack_line_when_nothing_was_lost() -> None:
    text = render_summary({int(Op.cudaMalloc): _hist(2 * MS)}, elapsed_s=1.0, counters={"drop_stack": 0})
    assert "call stacks:" not in text
