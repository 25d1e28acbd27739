"""Each NCCL rank's collectives on this node, with what its host did before each: the node's half of the
cross-node straggler analysis (``analysis.cross_node`` does the other half, on the fleet client).

A rank's lateness at a collective is made in the time before it enters: the
*gap* since its previous NCCL call ended. For every collective call this
module gives the entry time on this node's wall clock, the duration, the gap,
and what the calling threads did in that gap according to this node's own
host events: preempted (and by whom), blocked (sleep, locks, I/O), waiting on
block I/O. The client lines the ranks up on one clock and asks which rank
came last; the answer's cause is then read from these columns, with no second
round trip and no raw host events leaving the node.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gpuscope.analysis.attribution import load_attribution
from gpuscope.analysis.context import Context
from gpuscope.analysis.engine import ExplainOptions, reading_events, resolve_window
from gpuscope.analysis.frame import load_frame
from gpuscope.analysis.intervals import distinct, merge, overlap_ns
from gpuscope.analysis.nccl_ranks import COLLECTIVES, INIT_OPS, Member, calls_of, communicators, hash_text, rank_steps
from gpuscope.analysis.overhead import identify_tracer
from gpuscope.model.ops import Op, op_name
from gpuscope.store.dashboard_read import sessions_brief

DEFAULT_LIMIT = 20_000  # calls per rank and op: the most recent ones
MAX_LIMIT = 200_000
COLUMNS = ("wall_ns", "dur_ns", "gap_ns", "preempted_ns", "blocked_ns", "block_io_ns")
TOP_PREEMPTORS = 3


def collective_calls(path: str | os.PathLike[str], opts: ExplainOptions, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """Every rank's collective calls in the window, per communicator, with the host activity before each.

    Raises DatabaseError for a missing or unreadable recording.
    """
    with reading_events(path) as conn:
        window = resolve_window(conn, opts)
        frame = load_frame(conn, window.start_ns, window.end_ns, opts.pids)
        attribution = load_attribution(conn)
        tracer = identify_tracer(conn)
        nodes = sorted({str(s["node"]) for s in sessions_brief(conn) if s["node"]})
    ctx = Context(frame, window, opts.pids, attribution=attribution, tracer_pids=tracer.pids)
    groups = []
    preemptors: set[int] = set()
    for comm_hash, members in communicators(ctx, attribution).items():
        ranks = [_member(ctx, m, limit, preemptors) for m in members]
        groups.append({"comm_hash": hash_text(comm_hash) if comm_hash else None, "members": ranks})
    return {
        "nodes": nodes,
        "window": window.as_dict(),
        "columns": list(COLUMNS),
        "communicators": groups,
        "processes": {str(p): frame.comm(p) or ("swapper" if p == 0 else None) for p in sorted(preemptors)},
    }


def _member(ctx: Context, m: Member, limit: int, preemptors: set[int]) -> dict[str, Any]:
    f = ctx.frame
    init = calls_of(ctx, m.pid, INIT_OPS)
    init_ts = int(f.ts[init].min()) if len(init) else None
    series = []
    for op in sorted(COLLECTIVES):
        if not len(calls_of(ctx, m.pid, frozenset({op}))):
            continue
        steps = rank_steps(ctx, m, op)
        cut = max(0, len(steps.ts) - limit)
        ts, dur, gap_start = steps.ts[cut:], steps.dur[cut:], steps.gap_start[cut:]
        activity = _gap_activity(ctx, m.pid, op, gap_start, ts)
        rows = np.column_stack([ts + ctx.window.wall_offset_ns, dur, ts - gap_start, *activity[:3]])
        series.append(
            {
                "op": op_name(op),
                # Counted from the communicator's creation when it is in the window: then the n-th call is the
                # same collective on every rank, whatever each node's recording holds before it.
                "first_seq": cut if init_ts is not None and init_ts <= int(steps.ts[0]) else None,
                "rows": rows.astype(np.int64).tolist(),
                "preemptors": activity[3],
            }
        )
        preemptors.update(p for per_call in activity[3] for p, _ in per_call)
    return {
        "pid": m.pid,
        "rank": m.rank,
        "nranks": m.nranks,
        "comm": f.comm(m.pid),
        "series": series,
    }


def _gap_activity(
    ctx: Context, pid: int, op: int, gap_start: np.ndarray, gap_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[list[int]]]]:
    """Per gap: preempted, blocked and block-I/O ns of the threads that make the calls; the top preemptors."""
    f = ctx.frame
    mine = calls_of(ctx, pid, frozenset({op}))
    tids = distinct(f.tid[mine])
    pre = ctx.preempting[np.isin(f.tid[ctx.preempting], tids)]
    sched = ctx.sched
    blocked = sched[np.isin(f.tid[sched], tids) & (f.arg0[sched] == 0)]
    bio = np.flatnonzero((f.op == int(Op.block_io)) & (f.pid == pid))
    out = []
    for rows in (pre, blocked, bio):
        ms, me = merge(f.ts[rows], f.ts[rows] + f.dur[rows])
        out.append(np.minimum(overlap_ns(gap_start, gap_end, ms, me), gap_end - gap_start))
    return out[0], out[1], out[2], _top_preemptors(ctx, pre, gap_start, gap_end)


def _top_preemptors(
    ctx: Context, rows: np.ndarray, gap_start: np.ndarray, gap_end: np.ndarray
) -> list[list[list[int]]]:
    """Per gap, up to TOP_PREEMPTORS ``[pid, ns]`` pairs: who held the CPU while the rank was kept off it."""
    f = ctx.frame
    per_gap: list[dict[int, int]] = [{} for _ in range(len(gap_start))]
    if len(rows) and len(gap_start):
        start, end = f.ts[rows], f.ts[rows] + f.dur[rows]
        gap = np.searchsorted(gap_start, start, side="right") - 1  # the gap each off-CPU interval starts in
        for j, s, e, who in zip(
            gap.tolist(), start.tolist(), end.tolist(), (f.handle[rows] >> 32).tolist(), strict=True
        ):
            if j < 0:
                continue
            ns = min(e, int(gap_end[j])) - max(s, int(gap_start[j]))
            if ns > 0:
                per_gap[j][who] = per_gap[j].get(who, 0) + ns
    return [[[p, t] for p, t in sorted(d.items(), key=lambda kv: -kv[1])[:TOP_PREEMPTORS]] for d in per_gap]
