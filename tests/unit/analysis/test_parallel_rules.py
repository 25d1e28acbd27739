"""Rules evaluated on two threads give the report one thread gives; shared facts are computed once."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from gpuscope.analysis.context import Context, shared
from gpuscope.analysis.engine import analyse
from gpuscope.analysis.parallel import evaluate
from gpuscope.analysis.rules import RULES
from gpuscope.model.findings import Finding
from gpuscope.model.ops import Op

from .builder import MS, US, Events, slow_syncs, steady_training


def _both_sides() -> Events:
    """Findings on both sides: preemption inside slow syncs (host), malloc spikes and a leak (GPU)."""
    ev = Events(comms={100: "train", 999: "stress"})
    slow_syncs(ev, steady_training(ev, 400), 4, 5 * MS, preempted=True, by_pid=999)
    # a second, healthy process: two of its launches a preemption covered, too few to compare (a note)
    other = steady_training(ev, 400, pid=200, start=3 * MS)
    for t in (other[10] - 10 * US, other[20] - 10 * US):
        ev.sched(t + 1 * US, 3 * US, pid=200, preempted=True, by_pid=999)
    for i in range(300):
        ev.add(
            Op.cudaMalloc, i * 13 * MS + 3 * MS, 20 * MS if i % 50 == 25 else 10 * US, handle=0x7000 + i, nbytes=1 << 20
        )
    return ev


def test_two_threads_give_the_report_one_thread_gives() -> None:
    # given a window with findings from host-side and GPU-side rules, and a too-few-to-compare note
    frame, window = _both_sides().frame()
    # when
    one = analyse(frame, window, threads=1)
    two = analyse(frame, window, threads=2)
    # then the findings, their order and the notes are the same
    kinds = [f.kind for f in one.findings]
    assert {"cpu-preemption", "allocator-churn", "memory-leak"} <= set(kinds), kinds
    assert any(n.startswith("too few calls to compare") for n in one.notes), one.notes
    assert two.as_dict(per_process=True) == one.as_dict(per_process=True)


class _NoteRule:
    """Writes a too-few-to-compare note; ``after`` (if given) is waited for first, ``done`` set after."""

    def __init__(self, rule_id: str, after: threading.Event | None, done: threading.Event) -> None:
        self.id, self._after, self._done = rule_id, after, done
        self.host_side = any(r.host_side for r in RULES if r.id == rule_id)

    def evaluate(self, ctx: Context) -> list[Finding]:
        if self._after is not None:
            assert self._after.wait(5), "the other side never ran"
        ctx.too_small.setdefault(self.id, []).append(f"noted by {self.id}")
        self._done.set()
        return []


def test_notes_follow_rule_order_whichever_thread_writes_first() -> None:
    # given a host-side rule listed first that writes its note only after a GPU-side rule wrote one
    frame, window = _both_sides().frame()
    gpu_wrote, host_wrote = threading.Event(), threading.Event()
    host, gpu = next(r.id for r in RULES if r.host_side), "sync-stall"
    rules = (_NoteRule(host, gpu_wrote, host_wrote), _NoteRule(gpu, None, gpu_wrote))
    # when both run at once
    report = analyse(frame, window, rules=rules, threads=2)
    # then the note lists them in rule order, not in the order they were written
    assert host_wrote.is_set()
    assert [n for n in report.notes if n.startswith("too few")] == [
        f"too few calls to compare (fewer than 3 affected), so no finding for: noted by {host}; noted by {gpu}"
    ]


class _Raises:
    id = next(r.id for r in RULES if r.host_side)
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        raise RuntimeError("a rule failed on the side thread")


def test_an_error_of_a_rule_on_the_side_thread_reaches_the_caller() -> None:
    frame, window = _both_sides().frame()
    ctx = Context(frame, window)
    with pytest.raises(RuntimeError, match="side thread"):
        evaluate((_Raises(), *[r for r in RULES if not r.host_side]), ctx, threads=2)


class _Counting(Context):
    computed = 0

    @shared
    def slow_fact(self: Context) -> np.ndarray:  # a shared fact is computed from any Context
        _Counting.computed += 1
        time.sleep(0.05)  # long enough for the second thread to ask while the first computes
        return np.arange(3)


def test_a_shared_fact_is_computed_once_when_two_threads_ask_at_once() -> None:
    frame, window = _both_sides().frame()
    ctx = _Counting(frame, window)
    got: list[np.ndarray] = []
    start = threading.Barrier(2)

    def ask() -> None:
        start.wait()
        got.append(ctx.slow_fact)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _Counting.computed == 1
    assert len(got) == 2 and got[0] is got[1]
