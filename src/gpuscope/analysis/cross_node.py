"""Cross-node NCCL stragglers: which rank enters each collective last, on one corrected clock, and why.

Input: each node's ``collective_calls`` answer (``analysis.collectives``)
and its measured clock offset (its clock minus ours) with the uncertainty.
Every rank's entry times are moved onto our clock; the n-th call of a
communicator's main collective is the same collective on every rank (NCCL
requires every rank to issue a communicator's collectives in one order).
The sequence is counted from the communicator's creation when every node
saw it; otherwise the ranks are lined up by time, and a note says so.

Per collective: the rank that entered last, its lateness (its entry minus
the median entry of the others) and the time the others waited for it (the
sum of its entry minus theirs). A rank is a persistent straggler when it is
last, by at least ``MIN_LATE_NS``, in at least ``MIN_SHARE`` of the
collectives and at least twice as often as any other rank, by more than
the clocks' uncertainty (its node's plus a peer's: each offset may be off
by its own, in opposite directions). An offset measured that far off makes
a rank look late in every call, so a smaller lateness is left out with a
note. Measures on one clock cannot confirm it: the others' longer waits in
the collective, and their shorter gaps after it, also hold their wake-up
delay when it opens, so they only bound the lateness from above. Its cause comes
from its own node's host events in the gaps before its late entries:
preempted by named processes, waiting on block I/O, otherwise blocked, or on
the CPU (host work or a data-loading gap, measured against its peers' gaps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuscope.analysis.collectives import COLUMNS
from gpuscope.analysis.stats import severity_for
from gpuscope.model.findings import Cause, Culprit, Effect, Finding, NodeFinding, Symptom
from gpuscope.model.units import fmt_ns

KIND = "nccl-cross-node-straggler"
MIN_CALLS = 10
MIN_LATE_NS = 100_000
MIN_SHARE = 0.2
RUNNER_UP_MAX = 0.5
CAUSE_SHARE = 0.3
POINT_TO_POINT = frozenset({"ncclSend", "ncclRecv"})  # two ranks, not all: no "last to enter" among the others
ALIGN_SEARCH = 64  # calls either side tried when the ranks are lined up by time


@dataclass(frozen=True, slots=True)
class NodeCalls:
    """One node's answer: its address, the node names its recording holds, its offset and the payload."""

    address: str
    offset_ns: int
    uncertainty_ns: int
    payload: dict[str, Any]

    @property
    def label(self) -> str:
        names = self.payload.get("nodes") or []
        return f"{names[0]} ({self.address})" if len(names) == 1 else self.address


@dataclass(frozen=True, slots=True)
class Rank:
    node: NodeCalls
    pid: int
    rank: int | None
    comm: str | None
    first_seq: int | None
    rows: np.ndarray  # COLUMNS of analysis.collectives, entry on OUR clock
    preemptors: list[list[list[int]]]

    def name(self) -> str:
        who = f"{self.comm}, pid {self.pid}" if self.comm else f"pid {self.pid}"
        return (
            f"rank {self.rank} on node {self.node.label} ({who})"
            if self.rank is not None
            else f"{who} on node {self.node.label}"
        )


def payload_problem(payload: object) -> str | None:
    """What makes a node's ``collective_calls`` answer unusable here (one line), or None when it is sound.

    The answer comes over the network from another gpuscope (maybe another
    version): each field this module reads is checked for its type and shape
    before anything is computed from it.
    """
    if not isinstance(payload, dict):
        return "not a JSON object"
    groups = payload.get("communicators", [])
    names = payload.get("processes", {})
    if not isinstance(groups, list) or not isinstance(names, dict):
        return "communicators is not a list, or processes not an object"
    if not all(isinstance(v, (str, type(None))) for v in names.values()):
        return "processes: a name that is not text"
    for i, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("members", []), list):
            return f"communicators[{i}]: not an object with a list of members"
        for j, m in enumerate(group.get("members", [])):
            where = f"communicators[{i}].members[{j}]"
            if not isinstance(m, dict) or not _is_int(m.get("pid")) or not isinstance(m.get("series", []), list):
                return f"{where}: not an object with an integer pid and a list of series"
            if not (m.get("rank") is None or _is_int(m.get("rank"))) or not isinstance(
                m.get("comm"), (str, type(None))
            ):
                return f"{where}: rank or comm of the wrong type"
            for k, series in enumerate(m.get("series", [])):
                problem = _series_problem(series)
                if problem:
                    return f"{where}.series[{k}]: {problem}"
    return None


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < 1 << 63


def _series_problem(s: object) -> str | None:
    if not isinstance(s, dict) or not isinstance(s.get("op"), str):
        return "not an object with an op name"
    rows, pre = s.get("rows"), s.get("preemptors")
    if not isinstance(rows, list) or not all(
        isinstance(r, list) and len(r) == len(COLUMNS) and all(_is_int(v) for v in r) for r in rows
    ):
        return f"rows are not lists of {len(COLUMNS)} integers"
    if not (s.get("first_seq") is None or _is_int(s.get("first_seq"))):
        return "first_seq is not an integer"
    if not isinstance(pre, list) or len(pre) != len(rows):
        return "preemptors do not match the rows"
    for per_call in pre:
        if not isinstance(per_call, list) or not all(
            isinstance(x, list) and len(x) == 2 and _is_int(x[0]) and _is_int(x[1]) for x in per_call
        ):
            return "preemptors are not [pid, ns] pairs"
    return None


def cross_node_stragglers(nodes: list[NodeCalls]) -> tuple[list[NodeFinding], list[str]]:
    """Findings of ranks persistently late into collectives across nodes, and notes on how they were matched.

    Each finding is tagged with the straggler's node (its ``NodeCalls.address``), as the nodes' own are.
    """
    findings: list[NodeFinding] = []
    notes: list[str] = []
    for comm_hash, op, ranks in _groups(nodes):
        if len({r.node.address for r in ranks}) < 2:
            continue  # one node: the node's own explain covers it, on one clock
        matched = _align(ranks)
        if matched is None:
            continue
        seqs, how = matched
        if how:
            notes.append(f"communicator {comm_hash} ({op}): {how}")
        found, withheld = _straggler(comm_hash, op, ranks, seqs)
        if found is not None:
            findings.append(found)
        if withheld:
            notes.append(withheld)
    return findings, notes


def _groups(nodes: list[NodeCalls]) -> list[tuple[str, str, list[Rank]]]:
    """(communicator, main op, its ranks across nodes); the main op is the one every rank calls most."""
    by_comm: dict[str, list[tuple[NodeCalls, dict[str, Any]]]] = {}
    for n in nodes:
        for group in n.payload.get("communicators", []):
            if group.get("comm_hash"):  # without a communicator hash, ranks of different jobs cannot be told apart
                by_comm.setdefault(str(group["comm_hash"]), []).extend((n, m) for m in group.get("members", []))
    out = []
    for comm_hash, members in sorted(by_comm.items()):
        counts: dict[str, int] = {}
        for _, m in members:
            for s in m.get("series", []):
                counts[s["op"]] = min(counts.get(s["op"], 1 << 62), len(s["rows"]))
        every = [
            op
            for op in counts
            if op not in POINT_TO_POINT and all(any(s["op"] == op for s in m.get("series", [])) for _, m in members)
        ]
        if not every:
            continue
        op = max(every, key=lambda o: (counts[o], o))
        if counts[op] < MIN_CALLS:
            continue
        ranks = []
        for n, m in members:
            s = next(s for s in m["series"] if s["op"] == op)
            rows = np.asarray(s["rows"], dtype=np.int64).reshape(-1, len(COLUMNS))
            rows[:, 0] -= n.offset_ns
            ranks.append(
                Rank(n, int(m["pid"]), m.get("rank"), m.get("comm"), s.get("first_seq"), rows, s["preemptors"])
            )
        out.append((comm_hash, op, ranks))
    return out


def _align(ranks: list[Rank]) -> tuple[list[int], str] | None:
    """The sequence number of each rank's first row, and how it was found ('' when counted from creation)."""
    if all(r.first_seq is not None for r in ranks):
        return [int(r.first_seq or 0) for r in ranks], ""
    # Line up by time: the rank that started latest is the reference; each other rank's call nearest to the
    # reference's first call (on the corrected clock) is the same collective.
    ref = max(range(len(ranks)), key=lambda i: int(ranks[i].rows[0, 0]))
    t0 = int(ranks[ref].rows[0, 0])
    seqs = []
    for r in ranks:
        ts = r.rows[:, 0]
        j = int(np.searchsorted(ts, t0))
        cands = [k for k in range(max(0, j - ALIGN_SEARCH), min(len(ts), j + ALIGN_SEARCH)) if k >= 0]
        if not cands:
            return None
        k = min(cands, key=lambda k: abs(int(ts[k]) - t0))
        seqs.append(-k)  # this rank's row k is sequence 0
    return seqs, "no node saw the communicator created: calls matched by time on the corrected clocks"


def _straggler(comm_hash: str, op: str, ranks: list[Rank], seqs: list[int]) -> tuple[NodeFinding | None, str]:
    """The persistent straggler of one communicator's collectives, if any, or why one was withheld."""
    lo = max(s for s in seqs)
    hi = min(s + len(r.rows) for s, r in zip(seqs, ranks, strict=True))
    n = hi - lo
    if n < MIN_CALLS:
        return None, ""
    idx = [np.arange(lo - s, hi - s) for s in seqs]  # row of each rank for sequences lo..hi-1
    entry = np.column_stack([r.rows[i, 0] for r, i in zip(ranks, idx, strict=True)])  # (n, ranks)
    last = np.argmax(entry, axis=1)
    top = entry[np.arange(n), last]
    # The last entry is each row's maximum: the others are the rest of the sorted row. Relative to the row's
    # first entry, so that float medians of Unix-time nanoseconds do not round.
    rel = entry - entry.min(axis=1, keepdims=True)
    lateness = (rel.max(axis=1) - np.median(np.sort(rel, axis=1)[:, :-1], axis=1)).astype(np.int64)
    waited = (top[:, None] - entry).sum(axis=1)
    late = lateness >= MIN_LATE_NS
    times_last = np.bincount(last[late], minlength=len(ranks))
    order = np.argsort(-times_last)
    s = int(order[0])
    if times_last[s] < MIN_SHARE * n or (len(order) > 1 and times_last[order[1]] >= RUNNER_UP_MAX * times_last[s]):
        return None, ""
    mine = late & (last == s)
    share = float(mine.sum()) / n
    r = ranks[s]
    rows = r.rows[idx[s]]
    lost = int(waited[mine].sum())
    span = int(entry.max() - entry.min()) or 1
    lat_p50 = int(np.median(lateness[mine]))
    # Each node's offset may be off by its uncertainty, the straggler's and a peer's in opposite directions.
    uncertainty = r.node.uncertainty_ns + max(q.node.uncertainty_ns for j, q in enumerate(ranks) if j != s)
    if lat_p50 <= uncertainty:
        return None, (
            f"communicator {comm_hash} ({op}): {r.name()} looked last by {fmt_ns(lat_p50)} (p50) in {share:.0%} of "
            f"calls, within the clocks' uncertainty (±{fmt_ns(uncertainty)}): not reported, as offsets measured "
            "that far off would show the same; measure the clocks over a faster network to compare such lateness"
        )
    peer_gap = int(
        np.median([np.median(q.rows[i, 2]) for j, (q, i) in enumerate(zip(ranks, idx, strict=True)) if j != s])
    )
    own_gap = int(np.median(rows[mine, 2]))
    cause = _cause(r, rows, mine, lateness, own_gap, peer_gap, idx[s])
    evidence = [
        f"{r.name()} entered {op} last, {fmt_ns(lat_p50)} (p50) after the others, in {int(mine.sum())} of {n} "
        f"calls ({share:.0%}); the other ranks waited {fmt_ns(lost)} in all for it",
        f"its time before each late call (since its previous NCCL call ended): {fmt_ns(own_gap)} p50 vs "
        f"{fmt_ns(peer_gap)} on the other ranks",
        "clocks: " + ", ".join(f"{q.node.label} {q.node.offset_ns / 1e6:+.3f} ms ±{q.node.uncertainty_ns / 1e6:.3f} ms"
                               for q in {q.node.address: q for q in ranks}.values())
        + " (corrected before comparing)",
    ]  # fmt: skip
    ratio = own_gap / max(peer_gap, 1)
    extra: dict[str, float | int | str] = {
        "rank": r.rank if r.rank is not None else -1,
        "node": r.node.label,
        "address": r.node.address,
        "comm_hash": comm_hash,
        "late_share": round(share, 3),
        "lateness_p50_ns": lat_p50,
        "waited_ns": lost,
        "clock_uncertainty_ns": uncertainty,
    }
    symptom = Symptom(
        f"{r.name()} enters {op} {fmt_ns(lat_p50)} after the others in {share:.0%} of calls; "
        f"{fmt_ns(lost)} of the other ranks' time spent waiting for it",
        op,
        r.pid,
        r.comm,
        count=int(mine.sum()),
        p50_ns=lat_p50,
        max_ns=int(lateness[mine].max()),
        total_ns=int(lateness[mine].sum()),
        extra=extra,
    )
    base = Cause(
        KIND,
        tuple(evidence),
        culprits=(Culprit("straggler", r.pid, comm=r.comm),),
        metrics={"late_share": round(share, 3), "lateness_p50_ns": lat_p50, "waited_ns": lost},
    )
    finding = Finding(
        rule=KIND,
        kind=KIND,
        severity=severity_for(lost // max(len(ranks) - 1, 1), span, ratio),
        symptom=symptom,
        causes=(base, cause),
        fix=_fix(cause.kind, r.name()),
        lost_ns=lost,
        wall_ns=span,
    )
    return NodeFinding(r.node.address, finding), ""


def _cause(
    r: Rank, rows: np.ndarray, mine: np.ndarray, lateness: np.ndarray, own_gap: int, peer_gap: int, idx: np.ndarray
) -> Cause:
    """What the straggler's node saw it do before its late entries."""
    excess = max(int(lateness[mine].sum()), 1)
    pre, blocked, bio = (int(rows[mine, c].sum()) for c in (3, 4, 5))
    calls = int(mine.sum())
    if pre >= CAUSE_SHARE * excess:
        by: dict[int, int] = {}
        for k in np.asarray(idx)[mine].tolist():
            for pid, ns in r.preemptors[k]:
                by[pid] = by.get(pid, 0) + ns
        names = r.node.payload.get("processes", {})
        total = sum(by.values()) or 1
        culprits = tuple(
            Culprit("preemptor", p, comm=names.get(str(p)), share=t / total, time_ns=t)
            for p, t in sorted(by.items(), key=lambda kv: -kv[1])[:5]
        )
        line = (
            f"{r.name()} was preempted {fmt_ns(pre // calls)} per late call before entering "
            f"({min(pre / excess, 1.0):.0%} of its lateness)"
            + (", by " + ", ".join(c.label() for c in culprits[:2]) if culprits else "")
        )
        effect = Effect(
            affected_calls=calls,
            unaffected_calls=len(mine) - calls,
            affected_p50_ns=own_gap,
            unaffected_p50_ns=peer_gap,
            p50_ratio=own_gap / max(peer_gap, 1),
            slowest_n=0,
            slowest_overlapped=0,
            excess_share=min(pre / excess, 1.0),
            explained_ns=pre,
        )
        return Cause("cpu-preemption", (line,), effect, culprits)
    if bio >= CAUSE_SHARE * excess:
        line = f"{r.name()} waited on block I/O {fmt_ns(bio // calls)} per late call"
        return Cause("block-io", (line,), metrics={"block_io_per_call_ns": bio // calls})
    if blocked >= CAUSE_SHARE * excess:
        line = f"{r.name()} was blocked (sleep, locks, I/O) {fmt_ns(blocked // calls)} per late call"
        return Cause("blocked", (line,), metrics={"blocked_per_call_ns": blocked // calls})
    line = (
        f"{r.name()} stayed on the CPU before its late calls (off-CPU "
        f"{fmt_ns((pre + blocked) // calls)} per call): host work or a data-loading gap "
        f"({fmt_ns(own_gap)} vs {fmt_ns(peer_gap)} on the other ranks)"
    )
    return Cause("host-work", (line,), metrics={"gap_p50_ns": own_gap, "peer_gap_p50_ns": peer_gap})


def _fix(kind: str, who: str) -> str:
    if kind == "cpu-preemption":
        return (
            f"keep other work off {who}'s cores: pin the rank to its own cores (taskset, a cgroup cpuset) and move "
            "or renice the named processes on that node"
        )
    if kind == "block-io":
        return f"take the reads off {who}'s step: prefetch or cache the data, async checkpointing, faster storage"
    if kind == "blocked":
        return f"find what {who} sleeps or locks on between collectives (data loading, logging, checkpoint writes)"
    return (
        f"balance the host work per step: {who} does more before each collective (uneven batches, data "
        "preprocessing, a slower or throttled CPU on its node); more DataLoader workers if it waits for input"
    )
