"""Rules about the flow of work: starvation between launches, GPU-bound waits, falling throughput."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.coverage import MIN_BUCKET_COVERAGE, Coverage
from gpuscope.analysis.cpu_profile import host_time_cause
from gpuscope.analysis.frame import BUCKET_NS, GPU_CALLS, SYNC_OPS
from gpuscope.analysis.gil import gil_waits
from gpuscope.analysis.idle_gaps import STARVE_GAP_NS, IdleGaps, idle_gaps
from gpuscope.analysis.intervals import distinct, merge, overlap_by_key, overlap_ns
from gpuscope.analysis.rules.base import spread_symptom, symptom_for
from gpuscope.analysis.stats import covered_share_series, rate_series, severity_for
from gpuscope.analysis.steps import sync_turns
from gpuscope.analysis.workers import WORKER_FIX, family, workers_of
from gpuscope.model.findings import Cause, Finding, Severity, Span, TimeSeries
from gpuscope.model.ops import Op, op_name
from gpuscope.model.units import fmt_ns

SYNC_SHARE = 0.3
HOST_EXPLAINED_MAX = 0.25
DROP = 0.4
STARVE_SHARE = 0.2
MIN_GAPS = 5
HOST_BOUND_ON_CPU = 0.8
STEADY_SPREAD = 2.0  # p75/p25 of the gaps at most: the steady beat of a loop
NOT_OWN_SHARE = 0.5
# A process whose host and GPU take turns (sync-in-loop) is starved only where its host work holds the GPU idle
# most of the time.
TAKES_TURNS_IDLE = 0.5


class DataStarvationRule:
    """The GPU idles between batches because the process's own host side does not feed it.

    The gaps are ``idle_gaps``': from a synchronisation's end to the next GPU call, known free of the
    process's GPU work in whatever way the recording stored its calls (every call, probe windows, or the
    reference's selective rows with its counts). A finding when:

    1. at least 5 gaps of ≥ 1 ms, together ≥ 20% of the process's wall time;
    2. the gaps are the process's own: other processes preempting its feeding thread cover less than half
       of them (that is ``cpu-preemption``), and its off-CPU time in them is not mostly waiting for its own
       block I/O (``blocking-io``);
    3. its host is what the GPU waits for, one of:

       - fed: most gaps end when a thread of its own or a forked child (a loader) wakes the feeding thread;
       - host-bound: the feeding thread is on-CPU in the gaps, and either the syncs waited on real GPU work
         (median ≥ 100 µs: the GPU's idleness is a loss by itself), or the scheduler was recorded for that
         thread, it ran ≥ 80% of the gaps, and the gaps come at a steady beat (p75/p25 ≤ 2: a loop that
         prepares each batch on the host while the GPU waits);
       - blocked: the feeding thread waits off-CPU, the syncs waited on real GPU work, and the gaps come at
         a steady beat (a loop that waits for its queue each step).

    Not starvation: quick syncs in irregular gaps (a program that uses the GPU now and then), a thread
    off-CPU between irregular bursts and not woken by its own (a server waiting for requests), quick syncs
    and no scheduler record of the thread (computing cannot be told from sleeping). Where gaps rest on an
    inferred bound that no count of the recording could check, the severity is at most HIGH. The process's
    forked children are named as its own workers (``workers_of``), a consequence of its configuration.
    """

    id = "data-starvation"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for p in ctx.call_pids:
            g = idle_gaps(ctx, p)
            if g is None or len(g.idle) < MIN_GAPS or int(g.idle.sum()) < STARVE_SHARE * g.wall_ns:
                continue
            turns = sync_turns(ctx, p)
            if turns is not None and turns.host_ns < TAKES_TURNS_IDLE * g.wall_ns:
                # The GPU is busy about as long as the host works, in turns: sync-in-loop. The host's own
                # on-CPU time is compared, not the idle gaps: on a contended machine those also hold the time
                # the thread was preempted, which is contention, not the process starving its GPU.
                continue
            if gil_waits(ctx, p) is not None:
                continue  # its feeding thread waits for the GIL another of its threads holds: gil-bound
            found = self._finding(ctx, g)
            if found is not None:
                out.append(found)
        return out

    def _finding(self, ctx: Context, g: IdleGaps) -> Finding | None:
        p, n, idle, wall = g.pid, len(g.idle), int(g.idle.sum()), g.wall_ns
        host = _feeder_time(ctx, g)
        span = max(int((g.end - g.start).sum()), 1)
        if host.not_own_ns >= NOT_OWN_SHARE * span:
            return None  # other processes held its CPU: cpu-preemption
        on_cpu = 1.0 - host.off_ns / span
        if on_cpu < 0.5 and host.io_ns >= 0.5 * host.off_ns:
            return None  # it waited for its own reads: blocking-io
        q25, q75 = np.percentile(g.idle, [25, 75])
        spread = float(q75 / max(q25, 1))
        steady = spread <= STEADY_SPREAD
        fed = _fed_gaps(ctx, p, g.tid, g.start, g.end)
        if fed[0] >= 0.5 * n:
            what = (
                f"the CUDA thread was blocked waiting for its feeder: {fed[0]} of {n} gaps ended when {fed[1]} woke it"
            )
            summary = "while it waits for its feeder"
        elif on_cpu >= 0.5:
            if g.quick and not (host.measured(n) and on_cpu >= HOST_BOUND_ON_CPU and steady):
                return None  # a program that uses the GPU lightly, or one whose thread may be sleeping
            what = "the feeding thread was on-CPU doing host work (preprocessing, Python overhead)"
            summary = "while its feeding thread computes on the CPU"
        else:
            if g.quick or not steady:
                return None  # a server waiting for requests, or a GPU used now and then
            what = "the feeding thread was blocked waiting (data-loader workers, queues, I/O)"
            summary = "while its feeding thread waits off-CPU"
        sched = (
            f" (switched out {host.in_gaps:,} times in them; {host.switches:,} times over the window, "
            f"{fmt_ns(host.off_total_ns)} off-CPU in all)"
            if host.measured(n)
            else " (no switch of it recorded in the gaps)"
        )
        lines = [
            f"{n} gaps ≥ {fmt_ns(STARVE_GAP_NS)} between a synchronisation and the next GPU call: "
            f"{fmt_ns(idle)} = {idle / wall:.0%} of wall time; p50 {fmt_ns(np.median(g.idle))}, "
            f"{'at a steady beat' if steady else 'irregular'} (p75/p25 {spread:.1f})",
            f"{what}: on-CPU {_share(on_cpu)} of the gaps{sched}",
        ]
        if g.basis:
            lines.append(f"the gaps rest on: {g.basis}")
        metrics = {
            "idle_ns": idle,
            "gaps": n,
            "on_cpu_share": round(on_cpu, 3),
            "on_cpu_measured": int(host.measured(n)),
            "fed_gaps": fed[0],
            "inferred_gaps": int(g.inferred.sum()),
            "unchecked_gaps": g.unchecked,
            "dropped_gaps": g.dropped,
        }
        # The gaps over the process's time in the window: when the GPU sat idle, bin by bin (four gaps a bin
        # at least: a bin shorter than a step would show the beat, not the share). With launches probed in
        # windows (the overhead budget), only gaps inside a window are known: a lower bound, and said so.
        lo, hi = ctx.call_spans.get(p, (ctx.window.start_ns, ctx.window.end_ns))
        label = "GPU idle" if ctx.coverage is None else "GPU idle, at least"
        series = covered_share_series(
            label, g.start, g.end, max(lo, ctx.window.start_ns), min(hi, ctx.window.end_ns), max(1, n // 4)
        )
        causes = [Cause(self.id, tuple(lines), metrics=metrics, series=series)]
        fix = (
            "feed the GPU ahead of time: more DataLoader workers, pin_memory=True, prefetch_factor, "
            "move preprocessing to the GPU or an earlier stage"
        )
        # Where the host's CPU time went in the gaps, from on-CPU samples of the process and its workers.
        sampled = host_time_cause(ctx.cpu_samples, set(family(ctx, p)), g.start, g.end, set(g.tid.tolist()))
        if sampled is not None:
            causes.append(sampled.cause)
            fix = sampled.fix or fix
        workers = workers_of(ctx, p)
        if workers is not None:
            line = workers.describe(ctx)
            if host.own_ns:
                line += f"; they held the feeding thread's CPU {fmt_ns(host.own_ns)} in the gaps"
            wm: dict[str, float | int] = {
                "workers": len(workers.pids),
                "worker_switches": workers.switches,
                "own_preempted_ns": host.own_ns,
            }
            causes.append(Cause("own-workers", (line,), metrics=wm))
            if sampled is None:
                # It has workers already: more of them is not the fix, taking the feeding thread's work is.
                fix = (
                    "move the per-batch host work off the feeding thread into its DataLoader workers (Dataset "
                    "__getitem__ / __getitems__, collate_fn), pin_memory=True, prefetch_factor"
                )
            fix += "; " + WORKER_FIX
        sev = severity_for(idle, wall)
        if g.unchecked:
            sev = min(sev, Severity.HIGH)  # some gaps rest on a shape no count could check
        sym = spread_symptom(
            f"the GPU of pid {p} idles {idle / wall:.0%} of the time between a wait and the next call, {summary}",
            "gpu-idle",
            p,
            ctx.frame.comm(p),
            g.idle,
            idle,
            count=n,
        )
        return Finding(
            rule=self.id,
            kind=self.id,
            severity=sev,
            symptom=sym,
            causes=tuple(causes),
            fix=fix,
            lost_ns=idle,
            wall_ns=wall,
        )


@dataclass(frozen=True, slots=True)
class _HostTime:
    """What the feeding threads did in the gaps: off the CPU in all, preempted by other processes or by the
    process's own children, blocked on its own block I/O; and their scheduler record: switches inside the
    gaps, and over the window.

    ``measured``: at least one switch of the feeding thread per gap. Only then does a gap without off-CPU
    time say the thread ran through it: the scheduler is seen watching it there (a thread that computes for
    long is switched out now and then); a gap with no switch at all may as well be a silent record.
    """

    off_ns: int
    not_own_ns: int
    own_ns: int
    io_ns: int
    in_gaps: int
    switches: int
    off_total_ns: int

    def measured(self, gaps: int) -> bool:
        return self.in_gaps >= gaps


def _feeder_time(ctx: Context, g: IdleGaps) -> _HostTime:
    f = ctx.frame
    s = ctx.sched[f.pid[ctx.sched] == g.pid]

    def within(rows: np.ndarray) -> int:
        ends = f.ts[rows] + f.dur[rows]
        return int(overlap_by_key(g.tid, g.start, g.end, f.tid[rows], f.ts[rows], ends).sum())

    pre = ctx.preempting[f.pid[ctx.preempting] == g.pid]
    fam = np.fromiter(family(ctx, g.pid), dtype=np.int64)
    by = f.handle[pre] >> 32
    own = np.isin(by, fam) & (by != g.pid)
    blocked = s[f.arg0[s] == 0]  # blocked, or without task state (imported)
    io = np.flatnonzero((f.op == int(Op.block_io)) & (f.pid == g.pid))
    waited = overlap_by_key(
        f.tid[blocked],
        f.ts[blocked],
        f.ts[blocked] + f.dur[blocked],
        f.tid[io],
        f.ts[io],
        f.ts[io] + np.maximum(f.dur[io], 1),
    )
    feeders = s[np.isin(f.tid[s], g.tid)]
    ends = f.ts[feeders] + f.dur[feeders]
    seen = overlap_by_key(f.tid[feeders], f.ts[feeders], np.maximum(ends, f.ts[feeders] + 1), g.tid, g.start, g.end)
    return _HostTime(
        off_ns=within(s),
        not_own_ns=within(pre[~np.isin(by, fam)]),
        own_ns=within(pre[own]),
        io_ns=within(blocked[waited > 0]),
        in_gaps=int(np.count_nonzero(seen)),
        switches=len(feeders),
        off_total_ns=int(f.dur[feeders].sum()),
    )


def _share(x: float) -> str:
    """A share in percent, with a decimal where rounding would say 100% of what is not all."""
    return f"{x:.1%}" if 0.99 <= x < 1 else f"{x:.0%}"


def _fed_gaps(ctx: Context, pid: int, tids: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> tuple[int, str]:
    """How many gaps end with the CUDA thread woken by its own process's other threads or its children (a
    data loader handing over a batch), and who woke it most."""
    f = ctx.frame
    wk = np.flatnonzero((f.op == int(Op.sched_wakeup)) & (f.pid == pid))
    if len(wk) == 0 or len(gs) == 0:
        return 0, ""
    waker_pid, waker_tid = f.handle[wk] >> 32, f.handle[wk] & 0xFFFFFFFF
    mine = np.isin(waker_pid, np.fromiter(family(ctx, pid), dtype=np.int64)) & (waker_tid != f.tid[wk])
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
    host_side = False

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
            if sync_turns(ctx, p) is not None:
                continue  # the host holds the GPU idle after each wait as well: sync-in-loop, not the GPU alone
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
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        # Every op of a process slows down together when the process does: one
        # finding per process, led by the op that lost the most time.
        drops: dict[
            int, list[tuple[int, int, str, np.ndarray, int, float, int, int, int, Span | None, TimeSeries | None]]
        ] = {}
        for p, op, pos, counts, bin_ns, t0 in self._rates(ctx):
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
            # The low-rate period: its first low bin to its last (bins of a known start only).
            at = np.flatnonzero(low)
            span = Span(t0 + int(at[0]) * bin_ns, t0 + (int(at[-1]) + 1) * bin_ns) if t0 is not None else None
            # The rate over the window, bin by bin: the fall, drawn (bins of a known start only).
            series = rate_series(f"{op_name(op)} calls", counts, t0, bin_ns) if t0 is not None else None
            drops.setdefault(p, []).append((lost, op, line, pos, int(low.sum()), drop, nb, peak_s, cur_s, span, series))
        out = []
        for p, items in drops.items():
            items.sort(key=lambda t: -t[0])
            lost, op, _, pos, nlow, drop, nb, peak_s, low_s, span, series = items[0]
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
                    causes=(Cause(self.id, lines, metrics=metrics, series=series),),
                    fix="look at the other findings for this process in the low-rate period; if none, compare "
                    "input sizes and batch shapes over time",
                    lost_ns=lost,
                    wall_ns=wall,
                    span=span,
                )
            )
        return out

    @staticmethod
    def _rates(ctx: Context) -> list[tuple[int, int, np.ndarray, np.ndarray, int, int | None]]:
        """(pid, op, positions, calls per bin, bin ns, start of the first bin) of every op with at least 50 calls
        and 5 whole bins; the start is None where the bins are not contiguous (seconds the overhead budget's
        windows barely covered are left out).

        From the exact per-second aggregates when present (every call counts,
        stored or not); the first and last seconds of an op are partial, so left out.
        """
        f, c, a = ctx.frame, ctx.calls, ctx.aggregates
        out: list[tuple[int, int, np.ndarray, np.ndarray, int, int | None]] = []
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
                    out.append((p, op, pos, counts, imp.width_ns, first + imp.width_ns))
        if a is not None:
            for p, op in a.op_keys():
                if op not in GPU_CALLS or p in skip:
                    continue
                m = (a.pid == p) & (a.op == op)
                if int(a.count[m].sum()) < 50:
                    continue
                b = (a.bucket[m] - a.bucket[m].min()) // BUCKET_NS
                counts = np.bincount(b.astype(np.int64), weights=a.count[m].astype(np.float64)).astype(np.int64)
                t0: int | None = int(a.bucket[m].min()) + BUCKET_NS
                if ctx.coverage is not None and ctx.coverage.is_sampled(op):
                    counts, t0 = _estimated_rates(ctx.coverage, int(a.bucket[m].min()), counts), None
                counts = counts[1:-1]
                if len(counts) >= 5:
                    out.append((p, op, rows.get((p, op), np.zeros(0, dtype=np.int64)), counts, BUCKET_NS, t0))
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
            out.append((p, op, pos, counts, bin_ns, int(ts[0])))
        return out


def _estimated_rates(coverage: Coverage, first_bucket: int, counts: np.ndarray) -> np.ndarray:
    """Per-second calls of a sampled op estimated from the windows; seconds they barely covered left out."""
    buckets = first_bucket + np.arange(len(counts), dtype=np.int64) * BUCKET_NS
    frac = coverage.fractions(buckets)
    ok = frac >= MIN_BUCKET_COVERAGE
    rates: np.ndarray = np.round(counts[ok] / frac[ok]).astype(np.int64)
    return rates


__all__ = ["DataStarvationRule", "SyncStallRule", "ThroughputDropRule"]
