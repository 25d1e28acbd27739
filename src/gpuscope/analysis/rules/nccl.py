"""NCCL straggler: one rank slower than its peers; and how ranks are grouped, for every NCCL rule.

Ranks are grouped by communicator (``analysis.nccl_ranks``).

What a straggler looks like. In a real NCCL job every rank waits inside the
collective for the slowest one, so the straggler's own collectives are SHORT,
its peers' are LONG, and the straggler's time *between* collectives (its
host work, or the time it is kept off the CPU) is LONG. Ranks that are not
synchronised (the stand-in library, or a rank that lags further every step)
show it as a longer collective-to-collective cycle instead. A rank is a
straggler when, on either measure, it exceeds the median of its peers by at
least ``MIN_EXCESS_NS`` and ``MIN_EXCESS_OF_CYCLE`` of the peers' cycle, in at
least ``MIN_CONSISTENCY`` of its chunks of consecutive steps (each above the
median of its peers' chunks), and no other rank comes close (it is *one*
rank, not a slow job).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.intervals import attribute, distinct, merge, overlap_ns
from gpuscope.analysis.nccl_ranks import (
    COLLECTIVES,
    Member,
    RankSteps,
    calls_of,
    communicators,
    hash_text,
    rank_steps,
    who,
)
from gpuscope.analysis.stats import pct, severity_for
from gpuscope.model.findings import Cause, Culprit, Effect, Finding, Symptom
from gpuscope.model.ops import Op, op_name
from gpuscope.model.units import fmt_ns

SCHED = int(Op.sched_switch)

MIN_STEPS = 10
CHUNKS = 10
MIN_EXCESS_NS = 100_000
MIN_EXCESS_OF_CYCLE = 0.10
MIN_CONSISTENCY = 0.8
RUNNER_UP_MAX = 0.5  # the second slowest rank's excess must be below half the straggler's
CAUSE_SHARE = 0.3  # a cause explains the straggler when it covers this share of its excess


def _main_op(ctx: Context, members: list[Member]) -> int | None:
    """The collective every member calls most often (at least MIN_STEPS times each): one per step."""
    best: tuple[int, int] | None = None
    for op in sorted(COLLECTIVES):
        n = min(len(calls_of(ctx, m.pid, frozenset({op}))) for m in members)
        if n >= MIN_STEPS and (best is None or n > best[0]):
            best = (n, op)
    return best[1] if best else None


def _chunk_means(values: np.ndarray) -> np.ndarray:
    if len(values) == 0:
        return values.astype(np.float64)
    k = max(1, len(values) // CHUNKS)
    n = len(values) // k * k
    return np.asarray(values[:n].reshape(-1, k).mean(axis=1), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class Lag:
    measure: str  # "gap" or "cycle"
    excess_ns: int  # per step, over the peers' median
    value_ns: int
    peers_ns: int
    consistency: float
    steps: int


def _lag(mine: np.ndarray, peers: list[np.ndarray], measure: str, peer_cycle_ns: float) -> Lag | None:
    if len(mine) < MIN_STEPS or any(len(p) < MIN_STEPS for p in peers):
        return None
    value = float(mine.mean())
    peer_means = [float(p.mean()) for p in peers]
    base = float(np.median(peer_means))
    excess = value - base
    if excess < max(MIN_EXCESS_NS, MIN_EXCESS_OF_CYCLE * peer_cycle_ns):
        return None
    pooled = np.concatenate([_chunk_means(p) for p in peers])
    threshold = float(np.median(pooled)) if len(pooled) else base
    chunks = _chunk_means(mine)
    consistency = float((chunks > threshold).mean()) if len(chunks) else 0.0
    return Lag(measure, int(excess), int(value), int(base), consistency, len(mine))


class NcclStragglerRule:
    """One rank of a communicator consistently slower than its peers, with what slowed it."""

    id = "nccl-straggler"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        att = ctx.window_attribution
        out = []
        for comm_hash, members in communicators(ctx, att).items():
            if len(members) < 2:
                continue
            op = _main_op(ctx, members)
            if op is None:
                continue
            steps = [rank_steps(ctx, m, op) for m in members]
            found = self._straggler(ctx, comm_hash, op, steps)
            if found is not None:
                out.append(found)
        return out

    def _lags(self, steps: list[RankSteps]) -> list[Lag | None]:
        lags: list[Lag | None] = []
        for i, s in enumerate(steps):
            peers = [p for j, p in enumerate(steps) if j != i]
            peer_cycle = float(np.median([p.cycles.mean() for p in peers if len(p.cycles)] or [0.0]))
            cands = [
                _lag(s.gaps[1:], [p.gaps[1:] for p in peers], "gap", peer_cycle),
                _lag(s.cycles, [p.cycles for p in peers], "cycle", peer_cycle),
            ]
            ok = [c for c in cands if c is not None and c.consistency >= MIN_CONSISTENCY]
            lags.append(max(ok, key=lambda c: c.excess_ns) if ok else None)
        return lags

    def _straggler(self, ctx: Context, comm_hash: int, op: int, steps: list[RankSteps]) -> Finding | None:
        lags = self._lags(steps)
        ranked = sorted(((lag.excess_ns, i) for i, lag in enumerate(lags) if lag is not None), reverse=True)
        if not ranked:
            return None
        best, i = ranked[0]
        if len(ranked) > 1 and ranked[1][0] >= RUNNER_UP_MAX * best:
            return None  # several slow ranks: a slow job, not one straggler
        lag = lags[i]
        assert lag is not None
        s = steps[i]
        peers = [p for j, p in enumerate(steps) if j != i]
        m = s.member
        lost = lag.excess_ns * lag.steps
        wall = max(int(s.ts[-1] + s.dur[-1] - s.ts[0]), 1)
        ratio = lag.value_ns / max(lag.peers_ns, 1)
        name = op_name(op)
        what = "time between collectives" if lag.measure == "gap" else f"{name}-to-{name} cycle"
        peers_text = ", ".join(who(p.member, ctx) for p in peers[:4]) + (" …" if len(peers) > 4 else "")
        own_p50 = pct(s.dur, 50)
        peer_p50 = int(np.median([pct(p.dur, 50) for p in peers]))
        evidence = [
            f"{who(m, ctx)}: mean {what} {fmt_ns(lag.value_ns)} vs {fmt_ns(lag.peers_ns)} for its peers "
            f"({peers_text}); longer than its peers' median in {lag.consistency:.0%} of its chunks of steps",
            f"{name} p50: {fmt_ns(own_p50)} on {who(m, ctx)} vs {fmt_ns(peer_p50)} on its peers"
            + (" (peers wait in the collective for it)" if peer_p50 > 2 * max(own_p50, 1) else ""),
        ]
        cause = self._cause(ctx, s, peers, lag)
        cause_text = cause.evidence[0] if cause.evidence else ""
        rank_text = who(m, ctx)
        summary = (
            f"{rank_text} is a straggler: {fmt_ns(lag.excess_ns)} slower per step than its peers "
            f"({ratio:.1f}×, {lag.steps} steps of {name}); {fmt_ns(lost)} lost to waiting on it"
        )
        extra: dict[str, float | int | str] = {
            "rank": m.rank if m.rank is not None else -1,
            "comm_hash": hash_text(comm_hash),
            "measure": lag.measure,
            "excess_per_step_ns": lag.excess_ns,
        }
        if m.nranks is not None:
            extra["nranks"] = m.nranks
        sym = Symptom(
            summary,
            name,
            m.pid,
            ctx.frame.comm(m.pid),
            count=lag.steps,
            p50_ns=own_p50,
            p99_ns=pct(s.dur, 99),
            max_ns=int(s.dur.max()),
            total_ns=int(s.dur.sum()),
            extra=extra,
        )
        base = Cause(
            self.id,
            tuple(evidence),
            culprits=(Culprit("straggler", m.pid, comm=ctx.frame.comm(m.pid)),),
            metrics={
                "excess_per_step_ns": lag.excess_ns,
                "consistency": round(lag.consistency, 3),
                "ratio": round(ratio, 2),
            },
        )
        return Finding(
            rule=self.id,
            kind=self.id,
            severity=severity_for(lost, wall, ratio),
            symptom=sym,
            causes=(base, cause),
            fix=self._fix(cause.kind, rank_text, cause_text),
            lost_ns=lost,
            wall_ns=wall,
        )

    def _off_cpu_per_step(self, ctx: Context, s: RankSteps, lag: Lag, preempted: bool) -> tuple[float, np.ndarray]:
        """Off-CPU time of the rank's threads inside its slow part of each step, per step; and the rows."""
        f = ctx.frame
        if preempted:
            # Preemption by the tracer is its measured overhead, never a rank's cause (Context.preempting).
            rows = ctx.preempting[f.pid[ctx.preempting] == s.member.pid]
        else:
            sched = ctx.sched
            rows = sched[(f.pid[sched] == s.member.pid) & (f.arg0[sched] == 0)]
            rows = rows[~np.isin(rows, ctx.stateless_sched)]
        q_start, q_end = (s.gap_start[1:], s.ts[1:]) if lag.measure == "gap" else (s.ts[:-1], s.ts[1:])
        if len(rows) == 0 or len(q_start) == 0:
            return 0.0, rows
        total = 0
        for tid in distinct(f.tid[rows]).tolist():
            r = rows[f.tid[rows] == tid]
            ms, me = merge(f.ts[r], f.ts[r] + f.dur[r])
            qs, qe = merge(q_start, q_end)
            total += int(overlap_ns(qs, qe, ms, me).sum())
        return total / len(q_start), rows

    def _cause(self, ctx: Context, s: RankSteps, peers: list[RankSteps], lag: Lag) -> Cause:
        f = ctx.frame
        pre, rows = self._off_cpu_per_step(ctx, s, lag, True)
        peer_pre = float(np.median([self._off_cpu_per_step(ctx, p, lag, True)[0] for p in peers]))
        extra_pre = pre - peer_pre
        if extra_pre >= CAUSE_SHARE * lag.excess_ns:
            q_start, q_end = (s.gap_start[1:], s.ts[1:]) if lag.measure == "gap" else (s.ts[:-1], s.ts[1:])
            by = attribute(q_start, q_end, f.ts[rows], f.ts[rows] + f.dur[rows], f.handle[rows] >> 32)
            preemptors = (f.handle[rows] >> 32).tolist()
            cg_of = {int(h): int(cg) for h, cg in zip(preemptors, f.stream[rows].tolist(), strict=True)}
            total = sum(by.values()) or 1
            culprits = tuple(
                Culprit(
                    "preemptor",
                    p,
                    comm=f.comm(p) or ("swapper" if p == 0 else None),
                    cgroup_id=cg_of.get(p) or None,
                    share=t / total,
                    time_ns=t,
                )
                for p, t in sorted(by.items(), key=lambda kv: -kv[1])[:5]
            )
            names = ", ".join(c.label() for c in culprits[:2])
            share = min(extra_pre / max(lag.excess_ns, 1), 1.0)
            line = (
                f"preemption of {who(s.member, ctx)}'s threads: {fmt_ns(pre)} per step vs {fmt_ns(peer_pre)} "
                f"on its peers ({share:.0%} of its excess)" + (f", by {names}" if names else "")
            )
            eff = Effect(
                affected_calls=lag.steps,
                unaffected_calls=0,
                affected_p50_ns=lag.value_ns,
                unaffected_p50_ns=lag.peers_ns,
                p50_ratio=lag.value_ns / max(lag.peers_ns, 1),
                slowest_n=0,
                slowest_overlapped=0,
                excess_share=share,
                explained_ns=int(extra_pre * lag.steps),
            )
            return Cause("cpu-preemption", (line,), eff, culprits)
        blocked, _ = self._off_cpu_per_step(ctx, s, lag, False)
        peer_blocked = float(np.median([self._off_cpu_per_step(ctx, p, lag, False)[0] for p in peers]))
        if blocked - peer_blocked >= CAUSE_SHARE * lag.excess_ns:
            line = (
                f"{who(s.member, ctx)} is blocked (sleep, I/O, locks) {fmt_ns(blocked)} per step vs "
                f"{fmt_ns(peer_blocked)} on its peers"
            )
            return Cause("blocked", (line,), metrics={"blocked_per_step_ns": int(blocked)})
        line = (
            f"{who(s.member, ctx)} stays on the CPU: its extra time per step is host work (off-CPU "
            f"{fmt_ns(pre + blocked)} per step), not scheduling"
        )
        return Cause("host-work", (line,), metrics={"off_cpu_per_step_ns": int(pre + blocked)})

    @staticmethod
    def _fix(kind: str, rank: str, line: str) -> str:
        if kind == "cpu-preemption":
            return (
                f"keep other work off {rank}'s cores: pin each rank to its own cores (taskset / cgroup cpuset, "
                "torchrun --local-ranks-filter with numactl) and move or renice the named preemptors"
            )
        if kind == "blocked":
            return (
                f"find what {rank} waits for between collectives (data loading, checkpoint I/O, logging): "
                "more DataLoader workers, async checkpointing, faster storage on that node"
            )
        return (
            f"balance the work per rank: {rank} does more host work per step (uneven batches or sequence "
            "lengths, data preprocessing, a slower or throttled CPU/GPU on its node)"
        )


__all__ = ["NcclStragglerRule"]
