"""The NCCL hang on constructed ranks: a rank silent while its peers go on, judged against the threshold."""

from __future__ import annotations

from gpuscope.analysis.rules.nccl_hang import NcclHangRule
from gpuscope.model.findings import Severity
from gpuscope.model.ops import Op

from .builder import MS, US, Events
from .test_rules_nccl import PIDS, _init, _step


def _hung_job(ev: Events, hang_after: int = 50, steps: int = 100) -> int:
    _init(ev)
    last = 0
    for r in PIDS:
        t = 1 * MS
        for _ in range(steps if r != 2 else hang_after):
            t = _step(ev, r, t, 100 * US) + 500 * US
        last = max(last, t)
    return last


def test_a_rank_silent_while_its_peers_go_on_is_a_critical_hang() -> None:
    # given rank 2 stopped after 50 steps, its peers did 100, and the window ends 5 s later
    ev = Events()
    end = _hung_job(ev)
    ev.add(Op.sched_switch, end + 5_000 * MS, 0, 999)  # the recording goes on for 5 s
    # when
    found = NcclHangRule(2_000 * MS).evaluate(ev.context())
    # then
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.CRITICAL and f.symptom.pid == PIDS[2] and f.symptom.extra["rank"] == 2
    assert f.symptom.op == "ncclAllReduce"  # the peers' next collective after its last one
    assert int(f.symptom.extra["silence_ns"]) > 5_000 * MS
    assert {c.pid for c in f.causes[0].culprits if c.role == "peer"} == {PIDS[0], PIDS[1]}


def test_a_hang_ends_at_the_ranks_exit_and_is_judged_against_the_threshold() -> None:
    ev = Events()
    end = _hung_job(ev)
    last2 = max(r[0] + r[1] for r in ev.rows if r[2] == PIDS[2])
    ev.add(Op.process_exit, last2 + 3_000 * MS, 0, PIDS[2])
    ev.add(Op.sched_switch, end + 60_000 * MS, 0, 999)
    found = NcclHangRule(2_000 * MS).evaluate(ev.context())
    assert len(found) == 1 and found[0].symptom.extra["exited"] == 1
    assert 2_900 * MS <= int(found[0].symptom.extra["silence_ns"]) <= 3_100 * MS
    assert NcclHangRule(4_000 * MS).evaluate(ev.context()) == []


def test_ranks_that_all_stopped_together_are_not_a_hang() -> None:
    ev = Events()
    _init(ev)
    end = 0
    for r in PIDS:
        t = 1 * MS
        for _ in range(50):
            t = _step(ev, r, t, 100 * US) + 500 * US
        end = max(end, t)
    ev.add(Op.sched_switch, end + 60_000 * MS, 0, 999)
    assert NcclHangRule(2_000 * MS).evaluate(ev.context()) == []
