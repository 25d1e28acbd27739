"""NCCL ranks as every NCCL reading groups them: communicators, their members, and each rank's steps.

Ranks are grouped by communicator: the unique-id hash recorded at
``ncclCommInitRank`` (the ``nccl_comms`` table, or the init call in the
window). Without any communicator information every process that issues
collectives is taken as one job. Shared by the straggler and hang rules and by
the node's half of the cross-node analysis (``analysis.collectives``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.attribution import Attribution
from gpuscope.analysis.context import Context
from gpuscope.analysis.frame import ops_of
from gpuscope.model.nccl_hang_text import rank_name
from gpuscope.model.ops import Op, OpKind

COLLECTIVES = ops_of(OpKind.COLLECTIVE)
NCCL_STEP_OPS = COLLECTIVES | {int(Op.ncclGroupStart), int(Op.ncclGroupEnd)}
INIT_OPS = frozenset({int(Op.ncclCommInitRank), int(Op.ncclCommInitRankConfig)})


@dataclass(frozen=True, slots=True)
class Member:
    pid: int
    rank: int | None
    nranks: int | None


@dataclass(frozen=True, slots=True)
class RankSteps:
    """One rank's steps: its calls of the communicator's main collective, with the time before each."""

    member: Member
    ts: np.ndarray  # entry of each main call
    dur: np.ndarray
    gap_start: np.ndarray  # end of the rank's previous NCCL call (the gap is [gap_start, ts])

    @property
    def gaps(self) -> np.ndarray:
        g: np.ndarray = self.ts - self.gap_start
        return g

    @property
    def cycles(self) -> np.ndarray:
        c: np.ndarray = np.diff(self.ts)
        return c


def hash_text(comm_hash: int) -> str:
    """The communicator hash as an unsigned hex string (the same in every rank)."""
    return f"{comm_hash & (2**64 - 1):#x}"


def who(m: Member, ctx: Context) -> str:
    """Name a rank in a sentence: its rank when known, its command and pid."""
    return rank_name(m.pid, m.rank, ctx.frame.comm(m.pid))


def communicators(ctx: Context, att: Attribution) -> dict[int, list[Member]]:
    """comm hash -> members: the pids that join or use a communicator (hash 0: no communicator known)."""
    f = ctx.frame
    c = ctx.calls
    coll = c[ctx.calls_of_ops(COLLECTIVES | INIT_OPS)]
    groups: dict[int, dict[int, Member]] = {}
    for pid, handle in {(int(p), int(h)) for p, h in zip(f.pid[coll].tolist(), f.handle[coll].tolist(), strict=True)}:
        comm = att.communicators.get((pid, handle))
        if comm is not None:
            groups.setdefault(comm.comm_hash, {})[pid] = Member(pid, comm.rank, comm.nranks)
    known = {pid for g in groups.values() for pid in g}
    rest = sorted({int(p) for p in f.pid[coll].tolist()} - known)
    if rest:
        groups.setdefault(0, {}).update({p: Member(p, att.ranks.get(p), None) for p in rest})
    return {
        h: sorted(g.values(), key=lambda m: (m.rank if m.rank is not None else 1 << 30, m.pid))
        for h, g in groups.items()
    }


def calls_of(ctx: Context, pid: int, ops: frozenset[int]) -> np.ndarray:
    """Rows of a process's calls of any of ``ops``."""
    rows: np.ndarray = ctx.calls[ctx.pid_calls_of(pid, ops)]
    return rows


def rank_steps(ctx: Context, m: Member, op: int) -> RankSteps:
    f = ctx.frame
    nccl = calls_of(ctx, m.pid, NCCL_STEP_OPS)
    order = np.argsort(f.ts[nccl], kind="stable")
    ts_all, end_all = f.ts[nccl][order], (f.ts[nccl] + f.dur[nccl])[order]
    run_end = np.maximum.accumulate(end_all) if len(end_all) else end_all
    main = nccl[order][f.op[nccl][order] == op]
    ts = f.ts[main]
    idx = np.searchsorted(ts_all, ts, side="left") - 1  # the calls that started before this one
    prev_end = np.where(idx >= 0, run_end[np.maximum(idx, 0)], ts)
    return RankSteps(m, ts, f.dur[main], np.minimum(prev_end, ts))
