"""The NCCL straggler on constructed ranks: found by its gaps or cycles, with its cause."""

from __future__ import annotations

from gpuscope.analysis.attribution import EMPTY, Attribution, Communicator
from gpuscope.analysis.rules.nccl import NcclStragglerRule
from gpuscope.model.findings import Finding, Severity
from gpuscope.model.ops import Op

from .builder import MS, US, Events

HASH = 0x5EED
PIDS = {0: 100, 1: 101, 2: 102}


def _init(ev: Events, world: int = 3) -> None:
    for r in range(world):
        ev.add(Op.ncclCommInitRank, 0, 50 * US, PIDS[r], handle=0xC0 + r, stream=HASH, arg0=r, arg1=world)
    ev.comms.update({pid: f"rank{r}" for r, pid in PIDS.items()})


def _step(ev: Events, r: int, t: int, dur: int) -> int:
    """One step of rank r from t: an allreduce of dur, then a grouped send/recv; returns the step's end."""
    pid = PIDS[r]
    ev.add(Op.ncclAllReduce, t, dur, pid, handle=0xC0 + r, arg0=1024)
    t += dur + 5 * US
    ev.add(Op.ncclGroupStart, t, 1 * US, pid)
    ev.add(Op.ncclSend, t + 2 * US, 3 * US, pid, handle=0xC0 + r)
    ev.add(Op.ncclRecv, t + 6 * US, 3 * US, pid, handle=0xC0 + r)
    ev.add(Op.ncclGroupEnd, t + 10 * US, 5 * US, pid)
    return t + 15 * US


def _synchronised_job(
    ev: Events, steps: int = 100, slow: int = 2, compute: int = 5 * MS, extra: int = 3 * MS
) -> list[tuple[int, int]]:
    """Real-NCCL shape: every allreduce ends together; the slow rank computes longer and waits less.

    Returns the slow rank's gaps (start, end) between its group end and its next allreduce.
    """
    _init(ev)
    t0 = 1 * MS
    period = compute + extra + 1 * MS
    gaps = []
    for i in range(steps):
        done = t0 + i * period + compute + extra + 500 * US  # all allreduces return here
        for r in PIDS:
            mine = compute + (extra if r == slow else 0)
            start = t0 + i * period + mine
            if r == slow and i:
                gaps.append((t0 + (i - 1) * period + compute + extra + 500 * US + 20 * US, start))
            _step(ev, r, start, done - start)
    return gaps


def _straggler(ev: Events, attribution: Attribution = EMPTY) -> list[Finding]:
    return NcclStragglerRule().evaluate(ev.context(attribution))


def test_the_rank_its_peers_wait_for_is_named_as_the_straggler() -> None:
    # given three synchronised ranks, rank 2 computing 3 ms longer every step (its allreduce short, theirs long)
    ev = Events()
    _synchronised_job(ev)
    # when
    found = _straggler(ev)
    # then
    assert len(found) == 1
    f = found[0]
    assert f.kind == "nccl-straggler" and f.symptom.pid == PIDS[2] and f.symptom.extra["rank"] == 2
    assert f.symptom.extra["measure"] == "gap"
    assert 2.5 * MS <= int(f.symptom.extra["excess_per_step_ns"]) <= 3.5 * MS
    assert "peers wait in the collective" in " ".join(f.causes[0].evidence)
    assert f.causes[1].kind == "host-work"  # no off-CPU time: its own host work
    assert f.severity >= Severity.HIGH  # 3 ms of every 9 ms step


def test_preemption_of_the_straggler_during_its_gaps_is_named_with_the_preemptor() -> None:
    ev = Events(comms={999: "hog"})
    gaps = _synchronised_job(ev)
    for _start, end in gaps:
        ev.sched(end - 2_500 * US, 2_400 * US, pid=PIDS[2], preempted=True, by_pid=999)
    found = _straggler(ev)
    assert len(found) == 1
    cause = found[0].causes[1]
    assert cause.kind == "cpu-preemption"
    assert cause.culprits[0].pid == 999 and cause.culprits[0].comm == "hog"
    assert "hog" in cause.evidence[0] and "rank 2" in found[0].fix


def test_an_unsynchronised_rank_with_a_longer_cycle_is_a_straggler() -> None:
    # given the stand-in shape: no waiting between ranks, rank 1 simply takes 2 ms longer per step
    ev = Events()
    _init(ev)
    for r in PIDS:
        t = 1 * MS
        for _ in range(60):
            t = _step(ev, r, t + (2 * MS if r == 1 else 0), 100 * US) + 200 * US
    found = _straggler(ev)
    assert [f.symptom.extra["rank"] for f in found] == [1]


def test_equal_ranks_and_a_slow_job_are_not_a_straggler() -> None:
    ev = Events()
    _init(ev)
    for r in PIDS:
        t = 1 * MS
        for i in range(60):
            # two ranks equally slow: a slow job, not one straggler
            t = _step(ev, r, t + (2 * MS if r in (1, 2) else 0) + (i % 3) * 10 * US, 100 * US) + 200 * US
    assert _straggler(ev) == []
    ev2 = Events()
    _synchronised_job(ev2, extra=20 * US)  # 20 µs is noise, not a straggler
    assert _straggler(ev2) == []


def test_without_init_calls_the_communicator_comes_from_the_attribution_tables() -> None:
    ev = Events()
    _synchronised_job(ev)
    ev.rows = [r for r in ev.rows if r[4] != int(Op.ncclCommInitRank)]
    comms = {(PIDS[r], 0xC0 + r): Communicator(HASH, r, 3) for r in PIDS}
    found = _straggler(ev, Attribution(communicators=comms))
    assert [f.symptom.extra["rank"] for f in found] == [2]
    # and with nothing known at all, the processes are still compared (named by pid)
    found = _straggler(ev)
    assert [f.symptom.pid for f in found] == [PIDS[2]] and found[0].symptom.extra["rank"] == -1
