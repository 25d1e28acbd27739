"""NCCL rules: one rank slower than its peers (straggler), and a collective that never returns (hang).

Ranks are grouped by communicator: the unique-id hash recorded at
``ncclCommInitRank`` (the ``nccl_comms`` table, or the init call in the
window). Without any communicator information every process that issues
collectives is taken as one job.

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

What a hang looks like without an entry event: calls are recorded when they
return, so a collective in flight is a rank whose NCCL calls stopped while
its peers went on, and whose silence (until it exited, or until now) passed
the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.attribution import Attribution, attribution_of
from gpuscope.analysis.context import Context
from gpuscope.analysis.frame import ops_of
from gpuscope.analysis.intervals import attribute, merge, overlap_ns
from gpuscope.analysis.stats import pct, severity_for
from gpuscope.model.findings import Cause, Culprit, Effect, Finding, Severity, Symptom
from gpuscope.model.ops import Op, OpKind, op_name
from gpuscope.model.units import fmt_ns

COLLECTIVES = ops_of(OpKind.COLLECTIVE)
NCCL_STEP_OPS = COLLECTIVES | {int(Op.ncclGroupStart), int(Op.ncclGroupEnd)}
INIT_OPS = frozenset({int(Op.ncclCommInitRank), int(Op.ncclCommInitRankConfig)})
SCHED = int(Op.sched_switch)
EXIT = int(Op.process_exit)

MIN_STEPS = 10
CHUNKS = 10
MIN_EXCESS_NS = 100_000
MIN_EXCESS_OF_CYCLE = 0.10
MIN_CONSISTENCY = 0.8
RUNNER_UP_MAX = 0.5  # the second slowest rank's excess must be below half the straggler's
CAUSE_SHARE = 0.3  # a cause explains the straggler when it covers this share of its excess
DEFAULT_HANG_THRESHOLD_NS = 30_000_000_000


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


def who(m: Member, ctx: Context) -> str:
    comm = ctx.frame.comm(m.pid)
    name = f"{comm}, pid {m.pid}" if comm else f"pid {m.pid}"
    return f"rank {m.rank} ({name})" if m.rank is not None else name


def communicators(ctx: Context, att: Attribution) -> dict[int, list[Member]]:
    """comm hash -> members: the pids that join or use a communicator (hash 0: no communicator known)."""
    f = ctx.frame
    c = ctx.calls
    coll = c[np.isin(f.op[c], np.fromiter(COLLECTIVES | INIT_OPS, dtype=np.int64))]
    groups: dict[int, dict[int, Member]] = {}
    for pid, handle in {(int(p), int(h)) for p, h in zip(f.pid[coll].tolist(), f.handle[coll].tolist(), strict=True)}:
        comm = att.communicators.get((pid, handle))
        if comm is not None:
            groups.setdefault(comm.comm_hash, {})[pid] = Member(pid, comm.rank, comm.nranks)
    known = {pid for g in groups.values() for pid in g}
    rest = sorted({int(p) for p in f.pid[coll].tolist()} - known)
    if rest:
        groups.setdefault(0, {}).update({p: Member(p, att.ranks.get(p), None) for p in rest})
    return {h: sorted(g.values(), key=lambda m: (m.rank if m.rank is not None else 1 << 30, m.pid))
            for h, g in groups.items()}  # fmt: skip


def _calls_of(ctx: Context, pid: int, ops: frozenset[int]) -> np.ndarray:
    f, c = ctx.frame, ctx.calls
    mine = c[f.pid[c] == pid]
    rows: np.ndarray = mine[np.isin(f.op[mine], np.fromiter(ops, dtype=np.int64))]
    return rows


def _ops_in_time_order(ctx: Context, rows: np.ndarray) -> np.ndarray:
    ops: np.ndarray = ctx.frame.op[rows[np.argsort(ctx.frame.ts[rows], kind="stable")]]
    return ops


def _main_op(ctx: Context, members: list[Member]) -> int | None:
    """The collective every member calls most often (at least MIN_STEPS times each): one per step."""
    best: tuple[int, int] | None = None
    for op in sorted(COLLECTIVES):
        n = min(len(_calls_of(ctx, m.pid, frozenset({op}))) for m in members)
        if n >= MIN_STEPS and (best is None or n > best[0]):
            best = (n, op)
    return best[1] if best else None


def rank_steps(ctx: Context, m: Member, op: int) -> RankSteps:
    f = ctx.frame
    nccl = _calls_of(ctx, m.pid, NCCL_STEP_OPS)
    order = np.argsort(f.ts[nccl], kind="stable")
    ts_all, end_all = f.ts[nccl][order], (f.ts[nccl] + f.dur[nccl])[order]
    run_end = np.maximum.accumulate(end_all) if len(end_all) else end_all
    main = nccl[order][f.op[nccl][order] == op]
    ts = f.ts[main]
    idx = np.searchsorted(ts_all, ts, side="left") - 1  # the calls that started before this one
    prev_end = np.where(idx >= 0, run_end[np.maximum(idx, 0)], ts)
    return RankSteps(m, ts, f.dur[main], np.minimum(prev_end, ts))


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

    id = kind = "nccl-straggler"

    def evaluate(self, ctx: Context) -> list[Finding]:
        att = attribution_of(ctx)
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
            cands = [_lag(s.gaps[1:], [p.gaps[1:] for p in peers], "gap", peer_cycle),
                     _lag(s.cycles, [p.cycles for p in peers], "cycle", peer_cycle)]  # fmt: skip
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
        summary = (f"{rank_text} is a straggler: {fmt_ns(lag.excess_ns)} slower per step than its peers "
                   f"({ratio:.1f}×, {lag.steps} steps of {name}); {fmt_ns(lost)} lost to waiting on it")  # fmt: skip
        extra: dict[str, float | int | str] = {"rank": m.rank if m.rank is not None else -1,
                                               "comm_hash": f"{comm_hash & (2**64 - 1):#x}",
                                               "measure": lag.measure, "excess_per_step_ns": lag.excess_ns}  # fmt: skip
        if m.nranks is not None:
            extra["nranks"] = m.nranks
        sym = Symptom(summary, name, m.pid, ctx.frame.comm(m.pid), lag.steps, own_p50, pct(s.dur, 99),
                      int(s.dur.max()), int(s.dur.sum()), extra)  # fmt: skip
        base = Cause(self.id, tuple(evidence), None, (Culprit("straggler", m.pid, None, ctx.frame.comm(m.pid)),),
                     {"excess_per_step_ns": lag.excess_ns, "consistency": round(lag.consistency, 3),
                      "ratio": round(ratio, 2)})  # fmt: skip
        fix = self._fix(cause.kind, rank_text, cause_text)
        return Finding(self.id, self.kind, severity_for(lost, wall, ratio), sym, (base, cause), fix, lost, wall)

    def _off_cpu_per_step(self, ctx: Context, s: RankSteps, lag: Lag, preempted: bool) -> tuple[float, np.ndarray]:
        """Off-CPU time of the rank's threads inside its slow part of each step, per step; and the rows."""
        f, sched = ctx.frame, ctx.sched
        rows = sched[(f.pid[sched] == s.member.pid) & ((f.arg0[sched] != 0) == preempted)]
        if not preempted:
            rows = rows[~np.isin(rows, ctx.stateless_sched)]
        q_start, q_end = (s.gap_start[1:], s.ts[1:]) if lag.measure == "gap" else (s.ts[:-1], s.ts[1:])
        if len(rows) == 0 or len(q_start) == 0:
            return 0.0, rows
        total = 0
        for tid in np.unique(f.tid[rows]).tolist():
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
            cg_of = {int(h): int(cg) for h, cg in zip((f.handle[rows] >> 32).tolist(), f.stream[rows].tolist(),
                                                      strict=True)}  # fmt: skip
            total = sum(by.values()) or 1
            culprits = tuple(
                Culprit("preemptor", p, None, f.comm(p) or ("swapper" if p == 0 else None), cg_of.get(p) or None,
                        t / total, t)
                for p, t in sorted(by.items(), key=lambda kv: -kv[1])[:5]
            )  # fmt: skip
            names = ", ".join(c.label() for c in culprits[:2])
            line = (f"preemption of {who(s.member, ctx)}'s threads: {fmt_ns(pre)} per step vs {fmt_ns(peer_pre)} "
                    f"on its peers ({min(extra_pre / max(lag.excess_ns, 1), 1.0):.0%} of its excess)"
                    + (f", by {names}" if names else ""))  # fmt: skip
            eff = Effect(lag.steps, 0, lag.value_ns, lag.peers_ns, lag.value_ns / max(lag.peers_ns, 1), 0, 0,
                         min(extra_pre / max(lag.excess_ns, 1), 1.0), int(extra_pre * lag.steps))  # fmt: skip
            return Cause("cpu-preemption", (line,), eff, culprits)
        blocked, _ = self._off_cpu_per_step(ctx, s, lag, False)
        peer_blocked = float(np.median([self._off_cpu_per_step(ctx, p, lag, False)[0] for p in peers]))
        if blocked - peer_blocked >= CAUSE_SHARE * lag.excess_ns:
            line = (f"{who(s.member, ctx)} is blocked (sleep, I/O, locks) {fmt_ns(blocked)} per step vs "
                    f"{fmt_ns(peer_blocked)} on its peers")  # fmt: skip
            return Cause("blocked", (line,), None, (), {"blocked_per_step_ns": int(blocked)})
        line = (f"{who(s.member, ctx)} stays on the CPU: its extra time per step is host work (off-CPU "
                f"{fmt_ns(pre + blocked)} per step), not scheduling")  # fmt: skip
        return Cause("host-work", (line,), None, (), {"off_cpu_per_step_ns": int(pre + blocked)})

    @staticmethod
    def _fix(kind: str, rank: str, line: str) -> str:
        if kind == "cpu-preemption":
            return (f"keep other work off {rank}'s cores: pin each rank to its own cores (taskset / cgroup cpuset, "
                    "torchrun --local-ranks-filter with numactl) and move or renice the named preemptors")  # fmt: skip
        if kind == "blocked":
            return (f"find what {rank} waits for between collectives (data loading, checkpoint I/O, logging): "
                    "more DataLoader workers, async checkpointing, faster storage on that node")  # fmt: skip
        return (f"balance the work per rank: {rank} does more host work per step (uneven batches or sequence "
                "lengths, data preprocessing, a slower or throttled CPU/GPU on its node)")  # fmt: skip


class NcclHangRule:
    """A collective that did not return for longer than ``threshold_ns``: CRITICAL.

    Two shapes. In flight: a rank whose NCCL calls stopped (until it exited, or until the
    window's end, which the live view sets to *now*) while its peers completed more
    collectives than it did. Returned late: one NCCL call that itself lasted past the threshold.
    """

    id = kind = "nccl-hang"

    def __init__(self, threshold_ns: int = DEFAULT_HANG_THRESHOLD_NS) -> None:
        self.threshold_ns = threshold_ns

    def evaluate(self, ctx: Context) -> list[Finding]:
        att = attribution_of(ctx)
        f = ctx.frame
        exits = np.flatnonzero(f.op == EXIT)
        exit_ts = {int(p): int(t) for p, t in zip(f.pid[exits].tolist(), f.ts[exits].tolist(), strict=True)}
        out = []
        for comm_hash, members in communicators(ctx, att).items():
            calls = {m.pid: _calls_of(ctx, m.pid, NCCL_STEP_OPS | INIT_OPS) for m in members}
            colls = {m.pid: np.sort(f.ts[_calls_of(ctx, m.pid, COLLECTIVES)]) for m in members}
            ops = {m.pid: _ops_in_time_order(ctx, _calls_of(ctx, m.pid, COLLECTIVES)) for m in members}
            # Count collectives since the communicator began when every rank's init is in the window;
            # otherwise from a common start, so a window that cuts the ranks unevenly does not count.
            firsts = [int(t[0]) for t in colls.values() if len(t)]
            joined = all(len(_calls_of(ctx, m.pid, INIT_OPS)) for m in members)
            t0 = 0 if joined or not firsts else max(firsts)
            for m in members:
                mine = calls[m.pid]
                if len(mine) == 0:
                    continue
                long = mine[f.dur[mine] >= self.threshold_ns]
                if len(long):
                    out.append(self._returned_late(ctx, comm_hash, m, int(long[np.argmax(f.dur[long])])))
                    continue
                last_end = int((f.ts[mine] + f.dur[mine]).max())
                until = exit_ts.get(m.pid, ctx.window.end_ns)
                silence = until - last_end
                if silence < self.threshold_ns:
                    continue
                done = int((colls[m.pid] >= t0).sum())
                ahead = {}
                for p in members:
                    if p.pid != m.pid:
                        theirs = colls[p.pid]
                        n = max(int((theirs >= t0).sum()) - done, int((theirs > last_end).sum()))
                        if n > 0:
                            ahead[p.pid] = n
                if not ahead:
                    continue  # everyone stopped: a pause of the whole job, or the end of the run
                # The call it is stuck in: the peers' next collective after as many as this rank completed.
                lead = max(ahead, key=lambda p: ahead[p])
                lead_ops = ops[lead][colls[lead] >= t0]
                stuck = op_name(int(lead_ops[done])) if done < len(lead_ops) else None
                out.append(self._in_flight(ctx, comm_hash, m, members, ahead, silence, last_end, done, stuck,
                                           m.pid in exit_ts))  # fmt: skip
        return out

    def _extra(self, m: Member, comm_hash: int, silence: int, exited: bool) -> dict[str, float | int | str]:
        return {"rank": m.rank if m.rank is not None else -1, "comm_hash": f"{comm_hash & (2**64 - 1):#x}",
                "silence_ns": silence, "exited": int(exited)}  # fmt: skip

    def _in_flight(self, ctx: Context, comm_hash: int, m: Member, members: list[Member], ahead: dict[int, int],
                   silence: int, last_end: int, done: int, stuck: str | None, exited: bool) -> Finding:  # fmt: skip
        f = ctx.frame
        by_pid = {p.pid: p for p in members}
        peer_text = ", ".join(f"{who(by_pid[p], ctx)} completed {n} more" for p, n in sorted(ahead.items())[:4])
        state = "until it exited" if exited else "so far"
        summary = (f"{who(m, ctx)} has not returned from NCCL for {fmt_ns(silence)} {state}"
                   + (f" (stuck in or before {stuck})" if stuck else "")
                   + f" while its peers went on: {peer_text}")  # fmt: skip
        evidence = (
            f"last NCCL call of {who(m, ctx)} returned at +{fmt_ns(last_end - ctx.window.start_ns)}; "
            f"{done} collectives completed (counted from the ranks' common start in the window)",
            f"peers: {peer_text}",
            f"threshold {fmt_ns(self.threshold_ns)}",
        )
        sym = Symptom(summary, stuck, m.pid, f.comm(m.pid), done, extra=self._extra(m, comm_hash, silence, exited))
        culprits = tuple(Culprit("peer", p, None, f.comm(p)) for p in sorted(ahead))
        cause = Cause(self.id, evidence, None, (Culprit("hung", m.pid, None, f.comm(m.pid)), *culprits),
                      {"silence_ns": silence, "threshold_ns": self.threshold_ns})  # fmt: skip
        return Finding(self.id, self.kind, Severity.CRITICAL, sym, (cause,), self._fix(ctx, m), silence,
                       max(silence, 1))  # fmt: skip

    def _returned_late(self, ctx: Context, comm_hash: int, m: Member, i: int) -> Finding:
        f = ctx.frame
        dur = int(f.dur[i])
        name = op_name(int(f.op[i]))
        summary = f"{who(m, ctx)} was blocked in {name} for {fmt_ns(dur)} before it returned"
        evidence = (f"{name} of {who(m, ctx)} entered at +{fmt_ns(int(f.ts[i]) - ctx.window.start_ns)} and "
                    f"returned {fmt_ns(dur)} later (threshold {fmt_ns(self.threshold_ns)})",)  # fmt: skip
        sym = Symptom(summary, name, m.pid, f.comm(m.pid), 1, dur, dur, dur, dur,
                      self._extra(m, comm_hash, dur, False))  # fmt: skip
        cause = Cause(self.id, evidence, None, (Culprit("hung", m.pid, None, f.comm(m.pid)),),
                      {"silence_ns": dur, "threshold_ns": self.threshold_ns})  # fmt: skip
        return Finding(self.id, self.kind, Severity.CRITICAL, sym, (cause,), self._fix(ctx, m), dur, max(dur, 1))

    @staticmethod
    def _fix(ctx: Context, m: Member) -> str:
        return (f"inspect {who(m, ctx)} while it hangs: `py-spy dump --pid {m.pid}` / `gdb -p {m.pid} -ex 'thread "
                "apply all bt'`; set NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 with a collective "
                "timeout (init_process_group(timeout=...)) so a hang fails fast instead of stalling the job")  # fmt: skip


__all__ = ["DEFAULT_HANG_THRESHOLD_NS", "NcclHangRule", "NcclStragglerRule"]
