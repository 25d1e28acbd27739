"""Cross-node straggler analysis over nodes' collective answers: corrected clocks, matching, causes, warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuscope.analysis.collectives import collective_calls
from gpuscope.analysis.cross_node import KIND, NodeCalls, cross_node_stragglers
from gpuscope.analysis.engine import ExplainOptions
from gpuscope.model.findings import Finding
from gpuscope.store.connect import connect_writer
from gpuscope.store.processes_write import NcclComm, insert_nccl_comms

from .builder import US, Events
from .test_rules_nccl import HASH as NCCL_HASH
from .test_rules_nccl import PIDS, _synchronised_job

MS = 1_000_000
STEP = 20 * MS
BASE = 1_795_000_000_000_000_000
HASH = "0xabc"


def _node(
    name: str,
    rank: int,
    late_ns: list[int],
    *,
    offset_ns: int = 0,
    uncertainty_ns: int = 100_000,
    first_seq: int | None = 0,
    skip: int = 0,
    activity: tuple[int, int, int] = (0, 0, 0),
    preemptor: int | None = None,
    clock_error_ns: int = 0,
) -> NodeCalls:
    """One rank's answer: call k enters at BASE + k*STEP + late_ns[k] on the TRUE clock, seen on a clock
    ``offset_ns`` ahead (and ``clock_error_ns`` more, which the measured offset missed); the gap before a
    late call holds ``activity`` (preempted, blocked, block I/O) ns."""
    rows, pre = [], []
    for k in range(skip, len(late_ns)):
        late = late_ns[k]
        act = activity if late else (0, 0, 0)
        rows.append([BASE + k * STEP + late + offset_ns + clock_error_ns, 1 * MS, 2 * MS + late, *act])
        pre.append([[preemptor, act[0]]] if preemptor is not None and act[0] else [])
    payload: dict[str, Any] = {
        "nodes": [name],
        "communicators": [
            {
                "comm_hash": HASH,
                "members": [
                    {
                        "pid": 100 + rank,
                        "rank": rank,
                        "nranks": 3,
                        "comm": "train",
                        "series": [
                            {"op": "ncclAllReduce", "first_seq": first_seq, "rows": rows, "preemptors": pre},
                            {"op": "ncclSend", "first_seq": first_seq, "rows": rows, "preemptors": pre},
                        ],
                    }
                ],
            }
        ],
        "processes": {str(preemptor): "hog"} if preemptor is not None else {},
    }
    return NodeCalls(f"{name}:8443", offset_ns, uncertainty_ns, payload)


def _findings(nodes: list[NodeCalls]) -> list[Finding]:
    """The cross-node findings, without the node each is tagged with."""
    return [t.finding for t in cross_node_stragglers(nodes)[0]]


def _late_every(n: int, every: int, by: int) -> list[int]:
    return [by if k % every == 0 else 0 for k in range(n)]


def test_the_rank_late_into_most_collectives_is_named_with_its_node_lateness_and_the_others_wait() -> None:
    # given three ranks on three nodes; gamma's rank enters 3 ms late in every other call
    nodes = [_node("alpha", 0, [0] * 100), _node("beta", 1, [0] * 100), _node("gamma", 2, _late_every(100, 2, 3 * MS))]
    # when
    found, notes = cross_node_stragglers(nodes)
    # then the finding is tagged with the straggler's node, as the nodes' own findings are
    assert notes == []
    [tagged] = found
    f = tagged.finding
    assert tagged.node == "gamma:8443"
    assert f.kind == KIND and f.symptom.pid == 102 and f.symptom.op == "ncclAllReduce"
    assert f.symptom.extra["rank"] == 2 and f.symptom.extra["address"] == "gamma:8443"
    assert f.symptom.extra["late_share"] == 0.5 and f.symptom.extra["lateness_p50_ns"] == 3 * MS
    assert f.symptom.extra["waited_ns"] == 50 * 2 * 3 * MS  # 50 late calls, two ranks waiting 3 ms each
    assert f.causes[1].kind == "host-work"


def test_each_nodes_clock_offset_is_removed_before_comparing() -> None:
    # given gamma's clock 5 s ahead (and alpha's 2 s behind): uncorrected, gamma would be last every time
    nodes = [
        _node("alpha", 0, _late_every(100, 2, 3 * MS), offset_ns=-2_000_000_000),
        _node("beta", 1, [0] * 100),
        _node("gamma", 2, [0] * 100, offset_ns=5_000_000_000),
    ]
    # when
    [f] = _findings(nodes)
    # then the late rank is alpha's, by 3 ms, not gamma's by 5 s
    assert f.symptom.extra["rank"] == 0 and f.symptom.extra["lateness_p50_ns"] == 3 * MS
    assert "+5000.000 ms" in f.causes[0].evidence[2] and "-2000.000 ms" in f.causes[0].evidence[2]


def test_without_the_communicators_creation_calls_are_matched_by_time_and_a_note_says_so() -> None:
    # given beta's recording starting 7 calls later than the others', and no node that saw the creation
    late = _late_every(100, 2, 3 * MS)
    nodes = [
        _node("alpha", 0, [0] * 100, first_seq=None),
        _node("beta", 1, late, first_seq=None, skip=7),
        _node("gamma", 2, [0] * 100, first_seq=None),
    ]
    # when
    found, notes = cross_node_stragglers(nodes)
    # then
    [f] = [t.finding for t in found]
    assert f.symptom.extra["rank"] == 1 and f.symptom.extra["lateness_p50_ns"] == 3 * MS
    assert len(notes) == 1 and "matched by time" in notes[0]


def test_ranks_that_keep_pace_or_take_turns_being_last_give_no_finding() -> None:
    # given ranks with the same timing, then ranks each late in turn
    even = [_node(n, r, [0] * 60) for r, n in enumerate(("alpha", "beta", "gamma"))]
    turns = [_node(n, r, [2 * MS if k % 3 == r else 0 for k in range(60)]) for r, n in enumerate(("a", "b", "c"))]
    # when / then
    assert cross_node_stragglers(even)[0] == []
    assert cross_node_stragglers(turns)[0] == []


def test_ranks_of_one_node_only_are_left_to_that_nodes_own_explain() -> None:
    one = _node("alpha", 0, [0] * 50)
    other = _node("alpha", 1, _late_every(50, 1, 3 * MS))
    merged = NodeCalls(one.address, 0, 0, {**one.payload})
    merged.payload["communicators"][0]["members"] += other.payload["communicators"][0]["members"]
    assert cross_node_stragglers([merged])[0] == []


def test_preemption_before_the_late_entries_is_the_cause_with_the_preemptor_named() -> None:
    nodes = [
        _node("alpha", 0, [0] * 100),
        _node("beta", 1, [0] * 100),
        _node("gamma", 2, _late_every(100, 1, 4 * MS), activity=(3 * MS, 0, 0), preemptor=777),
    ]
    [f] = _findings(nodes)
    cause = f.causes[1]
    assert cause.kind == "cpu-preemption"
    assert [(c.pid, c.comm) for c in cause.culprits] == [(777, "hog")]
    assert "pin" in f.fix


def test_block_io_before_the_late_entries_is_the_cause() -> None:
    nodes = [
        _node("alpha", 0, [0] * 100),
        _node("beta", 1, _late_every(100, 1, 4 * MS), activity=(0, 3 * MS, 3 * MS)),
        _node("gamma", 2, [0] * 100),
    ]
    [f] = _findings(nodes)
    assert f.causes[1].kind == "block-io" and f.symptom.extra["rank"] == 1


def test_a_lateness_within_the_clock_uncertainty_is_left_out_with_a_note() -> None:
    # given ranks that keep pace, but gamma's offset measured 400 us wrong, within its ±300 us uncertainty plus
    # its peers' ±300 us: on the corrected clocks gamma enters every call 400 us after the others
    nodes = [
        _node("alpha", 0, [0] * 100, uncertainty_ns=300 * US),
        _node("beta", 1, [0] * 100, uncertainty_ns=300 * US),
        _node("gamma", 2, [0] * 100, clock_error_ns=400 * US, uncertainty_ns=300 * US),
    ]
    # when
    found, notes = cross_node_stragglers(nodes)
    # then
    assert found == []
    [note] = notes
    assert "rank 2 on node gamma" in note and "400.0 µs" in note and "±600.0 µs" in note and "not reported" in note


def test_the_uncertainty_a_lateness_must_exceed_is_the_stragglers_node_and_a_peers_together() -> None:
    # given gamma late in every call; every clock uncertain by ±1 ms, alpha's by ±10 ms
    def nodes(late: int) -> list[NodeCalls]:
        return [
            _node("alpha", 0, [0] * 100, uncertainty_ns=10 * MS),
            _node("beta", 1, [0] * 100, uncertainty_ns=1 * MS),
            _node("gamma", 2, _late_every(100, 1, late), uncertainty_ns=1 * MS),
        ]

    # when / then: gamma's ±1 ms and alpha's ±10 ms may add up, so 1.5 ms (or 10.5 ms) late is not reported
    assert cross_node_stragglers(nodes(1500 * US))[0] == []
    assert cross_node_stragglers(nodes(10_500 * US))[0] == []
    # and 12 ms is, with the uncertainty it was compared against
    [f] = _findings(nodes(12 * MS))
    assert f.symptom.extra["rank"] == 2 and f.symptom.extra["clock_uncertainty_ns"] == 11 * MS


def test_a_recordings_collective_calls_carry_the_preemption_in_each_gap_and_split_by_node_find_the_straggler(
    tmp_path: Path,
) -> None:
    # given a recording of a synchronised 3-rank job whose rank 2 is preempted by a hog in each of its gaps
    ev = Events(comms={999: "hog"})
    gaps = _synchronised_job(ev)
    for _start, end in gaps:
        ev.sched(end - 2_500 * US, 2_400 * US, pid=PIDS[2], preempted=True, by_pid=999)
    db = ev.to_db(tmp_path / "job.db")
    conn = connect_writer(db)  # the communicators the tracer stores from each rank's ncclCommInitRank
    insert_nccl_comms(conn, 1, [NcclComm(PIDS[r], 0xC0 + r, NCCL_HASH, r, 3, 0) for r in PIDS])
    conn.commit()
    conn.close()
    # when
    payload = collective_calls(db, ExplainOptions())
    # then each rank's calls come with the host activity before each
    [group] = payload["communicators"]
    assert group["comm_hash"] == "0x5eed" and [m["rank"] for m in group["members"]] == [0, 1, 2]
    slow = next(s for s in group["members"][2]["series"] if s["op"] == "ncclAllReduce")
    assert slow["first_seq"] == 0 and len(slow["rows"]) == 100
    assert [r[3] for r in slow["rows"][1:]] == [2_400 * US] * 99  # preempted_ns in each gap
    assert slow["preemptors"][1] == [[999, 2_400 * US]] and payload["processes"]["999"] == "hog"
    # and, each rank served as if from its own node, the cross-node analysis names rank 2 and the hog
    nodes = []
    for i, member in enumerate(group["members"]):
        part = {**payload, "communicators": [{"comm_hash": group["comm_hash"], "members": [member]}]}
        nodes.append(NodeCalls(f"node{i}:8443", 0, 0, part))
    [f] = _findings(nodes)
    assert f.symptom.extra["rank"] == 2 and f.causes[1].kind == "cpu-preemption"
    assert f.causes[1].culprits[0].pid == 999
