"""Rules about the flow of work: starvation between launches, GPU-bound waits, falling throughput."""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.coverage import MIN_BUCKET_COVERAGE, Coverage
from gpuscope.analysis.frame import BUCKET_NS, GPU_CALLS, GPU_WORK, SYNC_OPS
from gpuscope.analysis.intervals import distinct, merge, overlap_by_key, overlap_ns
from gpuscope.analysis.rules.base import symptom_for
from gpuscope.analysis.stats import severity_for
from gpuscope.model.findings import Cause, Finding, Severity, Symptom
from gpuscope.model.op_table import in_ops
from gpuscope.model.ops import Op, op_name
from gpuscope.model.units import fmt_ns

STARVE_GAP_NS = 1_000_000
STARVE_SHARE = 0.2
STARVE_MIN_SYNC_NS = 100_000
SYNC_SHARE = 0.3
HOST_EXPLAINED_MAX = 0.25
DROP = 0.4


class DataStarvationRule:
    """Long gaps with no GPU work while the feeding thread computes on the CPU or waits for data."""

    id = "data-starvation"

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        out = []
        for p in ctx.call_pids:
            w = c[ctx.pid_calls_of(p, GPU_WORK)]
            is_sync = in_ops(f.op[w], SYNC_OPS)
            if int(is_sync.sum()) < 10:
                continue
            # Waits that saw real GPU work make the GPU's idleness meaningful by themselves; after quick
            # ones (a small model, a fast GPU) it needs the evidence of a feeder, below.
            quick = float(np.median(f.dur[w[is_sync]])) < STARVE_MIN_SYNC_NS
            # After a synchronisation returns the GPU has nothing queued (on that stream) until the next
            # call: those gaps are GPU idle time for sure; gaps after async launches are not.
            after = np.flatnonzero(is_sync[:-1])
            gap_s = f.ts[w[after]] + f.dur[w[after]]
            gap_e = f.ts[w[after + 1]]
            gap = np.maximum(gap_e - gap_s, 0)
            if ctx.coverage is not None:
                # Launches and copies are probed in windows (the overhead budget): a gap is known to be
                # free of them only inside a window; one that reaches outside may hide a whole step's work.
                gap = np.where(ctx.coverage.fully_covered(gap_s, gap_e), gap, 0)
            # A GPU shared with other processes is not idle while they use it.
            ps, pe = ctx.peer_work_spans(p)
            gap = gap - overlap_ns(gap_s, np.maximum(gap_e, gap_s), ps, pe)
            long = gap >= STARVE_GAP_NS
            wall = ctx.pid_span_ns(p)
            if ctx.coverage is not None:
                # Idle time is seen only inside the windows: compared with the time they covered.
                lo, hi = ctx.call_spans.get(p, (0, 0))
                wall = min(wall, max(ctx.coverage.covered_ns(lo, hi), 1))
            idle = int(gap[long].sum())
            if idle < STARVE_SHARE * wall:
                continue
            tids = f.tid[w[after + 1]][long]
            s = ctx.sched
            s = s[f.pid[s] == p]
            off = overlap_by_key(tids, gap_s[long], gap_e[long], f.tid[s], f.ts[s], f.ts[s] + f.dur[s])
            on_cpu = 1.0 - float(off.sum()) / max(idle, 1)
            fed = _fed_gaps(ctx, p, tids, gap_s[long], gap_e[long])
            if quick and (on_cpu >= 0.5 or fed[0] < 0.5 * int(long.sum())):
                # Quick waits and gaps spent computing, or idle without a feeder: a program that uses the
                # GPU lightly, or a server waiting for requests. Not starvation.
                continue
            if fed[0]:
                what = (
                    f"the CUDA thread was blocked waiting for its feeder: {fed[0]} of {int(long.sum())} gaps ended "
                    f"when {fed[1]} woke it"
                )
            elif on_cpu >= 0.5:
                what = "the feeding thread was on-CPU doing host work (preprocessing, Python overhead)"
            else:
                what = "the feeding thread was blocked waiting (data-loader workers, queues, I/O)"
            lines = (
                f"{int(long.sum())} gaps ≥ {fmt_ns(STARVE_GAP_NS)} between a synchronisation and the next GPU call: "
                f"{fmt_ns(idle)} = {idle / wall:.0%} of wall time",
                f"{what}: on-CPU {on_cpu:.0%} of the gaps",
            )
            sym = Symptom(
                f"the GPU of pid {p} idles {idle / wall:.0%} of the time between a wait and the next call",
                "gpu-idle",
                p,
                f.comm(p),
                int(long.sum()),
                int(np.median(gap[long])),
                int(np.percentile(gap[long], 99, method="inverted_cdf")),
                int(gap[long].max()),
                idle,
            )
            metrics = {
                "idle_ns": idle,
                "gaps": int(long.sum()),
                "on_cpu_share": round(on_cpu, 3),
                "fed_gaps": fed[0],
            }
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=severity_for(idle, wall),
                    symptom=sym,
                    causes=(Cause(self.id, lines, metrics=metrics),),
                    fix="feed the GPU ahead of time: more DataLoader workers, pin_memory=True, prefetch_factor, "
                    "move preprocessing to the GPU or an earlier stage",
                    lost_ns=idle,
                    wall_ns=wall,
                )
            )
        return out


def _fed_gaps(ctx: Context, pid: int, tids: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> tuple[int, str]:
    """How many gaps end with the CUDA thread woken by its own process's other threads or its children (a
    data loader handing over a batch), and who woke it most."""
    f = ctx.frame
    wk = np.flatnonzero((f.op == int(Op.sched_wakeup)) & (f.pid == pid))
    if len(wk) == 0 or len(gs) == 0:
        return 0, ""
    forks = np.flatnonzero((f.op == int(Op.process_fork)) & (f.pid == pid))
    family = {pid, *(int(h) for h in f.handle[forks].tolist())}
    waker_pid, waker_tid = f.handle[wk] >> 32, f.handle[wk] & 0xFFFFFFFF
    mine = np.isin(waker_pid, np.fromiter(family, dtype=np.int64)) & (waker_tid != f.tid[wk])
    wk, waker_pid, waker_tid = wk[mine], waker_pid[mine], waker_tid[mine]
    fed = np.zeros(len(gs), dtype=bool)
    wakers: dict[tuple[int, int], int] = {}
    for tid in distinct(tids).tolist():
        gi = np.flatnonzero(tids == tid)
        gi = gi[np.argsort(gs[gi], kind="stable")]
        m = f.tid[wk] == tid
        at = f.ts[wk[m]]
        idx = np.searchsorted(gs[gi], at, side="right") - 1
        ok = (idx >= 0) & (at <= ge[gi[np.maximum(idx, 0)]])
        fed[gi[idx[ok]]] = True
        for p, t in zip(waker_pid[m][ok].tolist(), waker_tid[m][ok].tolist(), strict=True):
            wakers[(p, t)] = wakers.get((p, t), 0) + 1
    if not wakers:
        return 0, ""
    (wp, wt), _ = max(wakers.items(), key=lambda kv: kv[1])
    comm = f.comm(wp)
    return int(fed.sum()), f"thread {wt} of {f'`{comm}` ' if comm else ''}(pid {wp})"


class SyncStallRule:
    """Synchronisations take much of the wall time and no host cause explains them: the GPU is the bottleneck."""

    id = "sync-stall"

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        out = []
        for p, op, pos in ctx.groups(min_count=10):
            if op not in SYNC_OPS:
                continue
            wall = ctx.pid_span_ns(p)
            # Union over threads: time at least one thread waited, so shares stay <= 100%.
            s, e = merge(f.ts[c[pos]], f.ts[c[pos]] + f.dur[c[pos]])
            total = int((e - s).sum())
            # Preemption by the tracer too: it is not GPU work either, though never a cause to report.
            preempted = int(ctx.preempted_ns[pos].sum()) + int(ctx.tracer_preempted_ns[pos].sum())
            host = preempted * total // max(int(f.dur[c[pos]].sum()), 1)
            if total < SYNC_SHARE * wall or host > HOST_EXPLAINED_MAX * total:
                continue
            # Waiting while another process's work holds the GPU is gpu-contention, not this process's own load.
            ps, pe = ctx.peer_work_spans(p)
            if int(overlap_ns(s, e, ps, pe).sum()) > HOST_EXPLAINED_MAX * total:
                continue
            lines = (
                f"{op_name(op)} waits {fmt_ns(total)} = {total / wall:.0%} of wall time",
                f"host causes (preemption) cover {host / max(total, 1):.0%} of it: the wait is GPU work",
            )
            # Waiting for a busy GPU is not a fault; it is where optimisation starts: at most MEDIUM.
            sev = Severity.MEDIUM if total >= 0.5 * wall else Severity.LOW
            summary = f"pid {p} waits on the GPU {total / wall:.0%} of its time ({op_name(op)})"
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=sev,
                    symptom=symptom_for(ctx, p, op, pos, summary, whole_op=True),
                    causes=(Cause(self.id, lines, metrics={"sync_share": round(total / wall, 3)}),),
                    fix="the GPU is the bottleneck: profile kernels (nsys/ncu), use mixed precision, fuse kernels, "
                    "and remove synchronisations that are not needed (.item(), .cpu())",
                    lost_ns=0,
                    wall_ns=wall,
                )
            )
        return out


class ThroughputDropRule:
    """An op's rate falls ≥ 40% below its peak for several consecutive bins."""

    id = "throughput-drop"

    def evaluate(self, ctx: Context) -> list[Finding]:
        # Every op of a process slows down together when the process does: one
        # finding per process, led by the op that lost the most time.
        drops: dict[int, list[tuple[int, int, str, np.ndarray, int, float, int, int, int]]] = {}
        for p, op, pos, counts, bin_ns in self._rates(ctx):
            nb = len(counts)
            peak = int(counts.max())
            if peak < 10:
                continue
            low = counts <= (1 - DROP) * peak
            # Bins before the rate first reaches its level are start-up (imports, model set-up, warm-up), not a
            # drop: a drop is a fall from a rate the process had.
            low[: int(np.argmax(~low))] = False
            run = best = 0
            for v in low.tolist():
                run = run + 1 if v else 0
                best = max(best, run)
            if best < 3:
                continue
            cur = int(counts[low].mean())
            lost = int(low.sum()) * bin_ns * (peak - cur) // max(peak, 1)
            drop = 1 - cur / peak
            line = (
                f"{op_name(op)} rate fell {drop:.0%}: peak {peak * 1e9 / bin_ns:.0f}/s, "
                f"{cur * 1e9 / bin_ns:.0f}/s in {int(low.sum())} of {nb} bins of {fmt_ns(bin_ns)}"
            )
            peak_s, cur_s = peak * 10**9 // bin_ns, cur * 10**9 // bin_ns
            drops.setdefault(p, []).append((lost, op, line, pos, int(low.sum()), drop, nb, peak_s, cur_s))
        out = []
        for p, items in drops.items():
            items.sort(key=lambda t: -t[0])
            lost, op, _, pos, nlow, drop, nb, peak_s, low_s = items[0]
            wall = ctx.pid_span_ns(p)
            sev = Severity.HIGH if drop >= 0.6 and nlow >= 0.2 * nb else Severity.MEDIUM
            lines = tuple(t[2] for t in items)
            others = [op_name(t[1]) for t in items[1:]]
            summary = f"{op_name(op)} throughput of pid {p} dropped {drop:.0%}"
            if others:
                summary += f" (with {', '.join(others[:3])}{'…' if len(others) > 3 else ''})"
            metrics = {"peak_per_s": float(peak_s), "low_per_s": float(low_s)}
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=min(sev, max(severity_for(lost, wall), Severity.MEDIUM)),
                    symptom=symptom_for(ctx, p, op, pos, summary, whole_op=True),
                    causes=(Cause(self.id, lines, metrics=metrics),),
                    fix="look at the other findings for this process in the low-rate period; if none, compare "
                    "input sizes and batch shapes over time",
                    lost_ns=lost,
                    wall_ns=wall,
                )
            )
        return out

    @staticmethod
    def _rates(ctx: Context) -> list[tuple[int, int, np.ndarray, np.ndarray, int]]:
        """(pid, op, positions, calls per bin, bin ns) of every op with at least 50 calls and 5 whole bins.

        From the exact per-second aggregates when present (every call counts,
        stored or not); the first and last seconds of an op are partial, so left out.
        """
        f, c, a = ctx.frame, ctx.calls, ctx.aggregates
        out = []
        imp = ctx.imported_rates
        skip: frozenset[int] = frozenset()
        rows = (
            {(g[0], g[1]): g[2] for g in ctx.groups(min_count=1, warm_only=False)}
            if imp is not None or a is not None
            else {}
        )
        if imp is not None:
            # Processes the reference recorded: its exact counts, or no rates at all (rows are selective).
            skip = imp.pids
            for (p, op), (first, counts) in imp.series.items():
                if op not in GPU_CALLS or int(counts.sum()) < 50:
                    continue
                pos = rows.get((p, op), np.zeros(0, dtype=np.int64))
                # A bucket can count fewer calls than rows stored for it (seen in real files): the larger holds.
                b = (f.ts[c[pos]] - first) // imp.width_ns
                b = b[(b >= 0) & (b < len(counts))]
                stored = np.bincount(b.astype(np.int64), minlength=len(counts))
                counts = np.maximum(counts, stored)[1:-1]
                if len(counts) >= 5:
                    out.append((p, op, pos, counts, imp.width_ns))
        if a is not None:
            for p, op in a.op_keys():
                if op not in GPU_CALLS or p in skip:
                    continue
                m = (a.pid == p) & (a.op == op)
                if int(a.count[m].sum()) < 50:
                    continue
                b = (a.bucket[m] - a.bucket[m].min()) // BUCKET_NS
                counts = np.bincount(b.astype(np.int64), weights=a.count[m].astype(np.float64)).astype(np.int64)
                if ctx.coverage is not None and ctx.coverage.is_sampled(op):
                    counts = _estimated_rates(ctx.coverage, int(a.bucket[m].min()), counts)
                counts = counts[1:-1]
                if len(counts) >= 5:
                    out.append((p, op, rows.get((p, op), np.zeros(0, dtype=np.int64)), counts, BUCKET_NS))
            return out
        for p, op, pos in ctx.groups(min_count=50):
            # A sampled op's rows exist only inside the probe windows: no rate over time can be read from them.
            if p in skip or (ctx.coverage is not None and ctx.coverage.is_sampled(op)):
                continue
            ts = f.ts[c[pos]]
            span = int(ts[-1] - ts[0])
            bin_ns = max(50_000_000, min(1_000_000_000, span // 10))
            nb = span // bin_ns
            if nb < 5:
                continue
            counts = np.bincount(((ts - ts[0]) // bin_ns).astype(np.int64), minlength=nb + 1)[:nb]
            out.append((p, op, pos, counts, bin_ns))
        return out


def _estimated_rates(coverage: Coverage, first_bucket: int, counts: np.ndarray) -> np.ndarray:
    """Per-second calls of a sampled op estimated from the windows; seconds they barely covered left out."""
    buckets = first_bucket + np.arange(len(counts), dtype=np.int64) * BUCKET_NS
    frac = coverage.fractions(buckets)
    ok = frac >= MIN_BUCKET_COVERAGE
    rates: np.ndarray = np.round(counts[ok] / frac[ok]).astype(np.int64)
    return rates


__all__ = ["DataStarvationRule", "SyncStallRule", "ThroughputDropRule"]
