"""Rules whose cause is the GPU side or the program's own use of CUDA."""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.frame import ALLOC_OPS, COPY_OPS, GPU_WORK, LAUNCH_OPS, SYNC_OPS
from gpuscope.analysis.intervals import distinct, is_member, merge, overlap_ns
from gpuscope.analysis.rules.base import effect_line, per_op_effects, symptom_for
from gpuscope.analysis.stats import pct, severity_for
from gpuscope.model.findings import Cause, Culprit, Finding, Severity
from gpuscope.model.op_table import in_ops
from gpuscope.model.ops import Op, op_name
from gpuscope.model.units import fmt_bytes, fmt_ns


class GpuContentionRule:
    """Several processes use the GPU at once: their waits overlap other processes' GPU work."""

    id = "gpu-contention"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        pids = np.array([p for p in ctx.call_pids if len(ctx.pid_calls_of(p, GPU_WORK))], dtype=np.int64)
        if len(pids) < 2:
            return []
        other = np.zeros(len(c), dtype=np.int64)
        for p in pids.tolist():
            own = ctx.pid_calls(p)
            s, e = ctx.peer_work_spans(p)
            other[own] = overlap_ns(ctx.call_start[own], ctx.call_end[own], s, e)
        affected = ctx.affected(other)
        effects = [o for o in per_op_effects(ctx, other, affected) if in_ops(np.array([o.op]), SYNC_OPS | COPY_OPS)[0]]
        peers_of = {
            p: tuple(Culprit("peer", q, None, f.comm(q)) for q in pids.tolist() if q != p) for p in pids.tolist()
        }
        out = []
        for p in sorted({o.pid for o in effects}):
            mine = [o for o in effects if o.pid == p]
            lost = sum(o.effect.explained_ns for o in mine)
            wall = ctx.pid_span_ns(p)
            top = mine[0]
            users = ", ".join(f"{f.comm(q) or '?'} (pid {q})" for q in pids.tolist())
            lines = (
                f"{len(pids)} processes issue GPU work in the window: {users}",
                *(effect_line(op_name(o.op), o.effect, "other processes' GPU work") for o in mine[:3]),
            )
            summary = (
                f"{op_name(top.op)} of pid {p} is {top.effect.slowdown()} while other processes "
                f"use the GPU; {fmt_ns(lost)} lost"
            )
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=severity_for(lost, wall, top.effect.p50_ratio),
                    symptom=symptom_for(ctx, p, top.op, top.positions, summary, whole_op=True),
                    causes=(Cause(self.id, lines, top.effect, peers_of[p]),),
                    fix="give each process its own GPU (CUDA_VISIBLE_DEVICES), or share it deliberately with "
                    "MPS / MIG instead of time-slicing",
                    lost_ns=lost,
                    wall_ns=wall,
                )
            )
        return out


class ColdStartRule:
    """First calls (context init, the first launch of each kernel) cost 10× or more of steady state."""

    id = "cold-start"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        cold = np.flatnonzero(ctx.cold)
        out = []
        for p in distinct(f.pid[c[cold]]).tolist():
            pos = cold[f.pid[c[cold]] == p]
            lost = int(f.dur[c[pos]].sum())
            wall = ctx.pid_span_ns(p)
            launches = in_ops(f.op[c[pos]], LAUNCH_OPS)
            kernels = len(set(f.handle[c[pos[launches]]].tolist()))
            ops = distinct(f.op[c[pos]]).tolist()
            worst = pos[np.argmax(f.dur[c[pos]])]
            lines = [
                f"{len(pos)} cold first calls cost {fmt_ns(lost)}; slowest {op_name(int(f.op[c[worst]]))} "
                f"{fmt_ns(float(f.dur[c[worst]]))}",
                "first calls of: " + ", ".join(op_name(o) for o in ops),
            ]
            if kernels:
                lines.append(f"first launch of {kernels} distinct kernels (lazy module loading), not contention")
            summary = f"pid {p} spends {fmt_ns(lost)} in {len(pos)} cold first calls ({lost / max(wall, 1):.0%} of its wall time)"
            sev = min(severity_for(lost, wall), Severity.HIGH)  # one-off cost: never CRITICAL
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=sev,
                    symptom=symptom_for(ctx, p, int(f.op[c[worst]]), pos, summary),
                    causes=(Cause(self.id, tuple(lines), metrics={"cold_calls": len(pos), "kernels": kernels}),),
                    fix="warm up before timing or serving (run a few iterations at start-up, call cudaFree(0) "
                    "early to create the context); CUDA_MODULE_LOADING=EAGER loads all kernels up front",
                    lost_ns=lost,
                    wall_ns=wall,
                )
            )
        return out


MEMCPY_SHARE = 0.3


class MemcpyBoundRule:
    """Copies take at least 30% of the process's wall time and more than its launches and syncs."""

    id = "memcpy-bound"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        out = []
        for p in ctx.call_pids:
            cp = c[ctx.pid_calls_of(p, COPY_OPS)]
            other = c[ctx.pid_calls_of(p, SYNC_OPS | LAUNCH_OPS)]
            a = ctx.aggregates
            wall = ctx.pid_span_ns(p)
            if a is not None:
                # Every copy counts, stored or not; summed durations capped at the wall time.
                n_copies = a.count_of(p, COPY_OPS)
                copy_ns = min(a.sum_ns_of(p, COPY_OPS), wall)
                other_ns = a.sum_ns_of(p, SYNC_OPS | LAUNCH_OPS)
                nbytes = int(a.bytes[a.mask(p, COPY_OPS)].sum())
            else:
                n_copies = len(cp)
                s, e = merge(f.ts[cp], f.ts[cp] + f.dur[cp])
                copy_ns = int((e - s).sum())
                other_ns = int(f.dur[other].sum())
                nbytes = int(f.bytes[cp].sum())
            if n_copies < 10 or len(cp) == 0:
                continue
            if copy_ns < MEMCPY_SHARE * wall or copy_ns <= other_ns:
                continue
            # Sizes and directions are per row: from the stored copies (all of them, or a sample).
            small = round(int((f.bytes[cp] < 64 * 1024).sum()) * n_copies / len(cp))
            dirs = {k: int((f.arg0[cp] == v).sum()) for k, v in (("H2D", 1), ("D2H", 2), ("D2D", 3))}
            directions = ", ".join(f"{k} {v}" for k, v in dirs.items() if v)
            lines = (
                f"{n_copies} copies take {fmt_ns(copy_ns)} = {copy_ns / wall:.0%} of wall time, "
                f"{fmt_bytes(nbytes)} at {nbytes / max(copy_ns, 1) * 1e9 / 2**30:.2f} GiB/s",
                f"directions: {directions}; {small} copies < 64 KiB",
            )
            summary = f"copies dominate pid {p}: {copy_ns / wall:.0%} of its wall time"
            op = int(np.bincount(f.op[cp]).argmax())
            metrics = {"copy_share": round(copy_ns / wall, 3), "bytes": nbytes, "small_copies": small}
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=severity_for(copy_ns // 2, wall),
                    symptom=symptom_for(ctx, p, op, np.flatnonzero(np.isin(c, cp)), summary, whole_op=True),
                    causes=(Cause(self.id, lines, metrics=metrics),),
                    fix="keep data on the GPU between steps; use pinned host memory (pin_memory=True) and "
                    "cudaMemcpyAsync on a side stream to overlap copies with compute; batch small copies",
                    lost_ns=copy_ns // 2,
                    wall_ns=wall,
                )
            )
        return out


SPIKE_RATIO = 10.0


# The two layers of one allocation: a runtime cudaMalloc enters the driver's cuMemAlloc, so each is read apart.
_ALLOC_LAYERS = (
    (frozenset({int(Op.cudaMalloc), int(Op.cudaMallocManaged)}), frozenset({int(Op.cudaFree)})),
    (frozenset({int(Op.cuMemAlloc), int(Op.cuMemAllocManaged)}), frozenset({int(Op.cuMemFree)})),
)
_ALLOC_FREE_OPS = frozenset().union(*(a | f for a, f in _ALLOC_LAYERS))
MIN_REACQUIRES = 3
MIN_CALLS_PER_CYCLE = 20  # the process's calls between two re-acquisitions, at the median
MIN_REACQUIRE_NS = 10_000  # median duration of the allocations that take memory again


def _alloc_layer(idx: np.ndarray, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(allocations, frees) among ``idx`` at one layer: the runtime's when the process used it, else the
    driver's. Never both: a runtime allocation is also a driver one, and would count twice."""
    for alloc_ops, free_ops in _ALLOC_LAYERS:
        al = idx[in_ops(ops, alloc_ops)]
        if len(al):
            return al, idx[in_ops(ops, free_ops)]
    return al, idx[in_ops(ops, _ALLOC_LAYERS[-1][1])]


_FIX_CHURN = (
    "stop the allocator from returning memory: remove torch.cuda.empty_cache() from the loop, "
    "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, keep tensor shapes stable"
)


class AllocatorChurnRule:
    """The caching allocator releasing and re-acquiring memory, seen two ways.

    Spikes: most allocation calls are cheap and some are many times slower, at
    a rhythm (an allocator that calls cudaMalloc often, e.g. the stand-ins).
    Re-acquisitions: a caching allocator (PyTorch's) makes no allocation call
    at all once warm, so allocation calls that keep coming back after memory
    was freed are the churn, however alike their durations.
    """

    id = "allocator-churn"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = self._spikes(ctx)
        seen = {x.symptom.pid for x in out}
        for p in ctx.call_pids:
            if p not in seen:
                found = self._reacquisitions(ctx, p)
                if found is not None:
                    out.append(found)
        return out

    def _reacquisitions(self, ctx: Context, p: int) -> Finding | None:
        f, c = ctx.frame, ctx.calls
        mine = ctx.pid_calls(p)
        sub = ctx.pid_calls_of(p, _ALLOC_FREE_OPS)
        al, fr = _alloc_layer(sub, f.op[c[sub]])
        if len(al) < MIN_REACQUIRES or len(fr) == 0:
            return None
        # Both are in time order already: positions into the calls, which the frame holds sorted by start.
        # An allocation after a free since the previous allocation starts a cycle: memory given back, taken again.
        # Warm-up allocations have no free between them; frees at exit have no allocation after them.
        frees_before = np.searchsorted(f.ts[c[fr]], f.ts[c[al]])
        starts = al[np.diff(frees_before, prepend=0) > 0]
        if len(starts) < MIN_REACQUIRES:
            return None
        # A caching allocator's cycles are many steps of other work apart. Allocating and freeing in every
        # iteration is a program calling cudaMalloc itself: the spikes path reads that, by its durations.
        between = np.diff(np.searchsorted(mine, starts))
        if float(np.median(between)) < MIN_CALLS_PER_CYCLE:
            return None
        again = al[frees_before > 0]
        # A device allocation that reaches the driver takes tens of µs; calls far cheaper than that were served
        # from a pool (cudaMallocAsync, a stand-in library) and cost nothing worth a finding.
        if float(np.median(f.dur[c[again]])) < MIN_REACQUIRE_NS:
            return None
        released = fr[f.ts[c[fr]] < f.ts[c[al[-1]]]]
        lost = int(f.dur[c[again]].sum() + f.dur[c[released]].sum())
        gaps = np.diff(f.ts[c[starts]])
        cv = float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else 1.0
        alloc_op, free_op = int(f.op[c[again[0]]]), int(f.op[c[released[0]]])
        rhythm = (
            f"periodic: every {fmt_ns(float(np.median(gaps)))} (cv {cv:.2f})"
            if cv <= 0.5
            else f"irregular (cv {cv:.2f})"
        )
        lines = (
            f"{len(starts)} times after warm-up the allocator gave memory back ({len(released)} {op_name(free_op)}, "
            f"{fmt_ns(float(f.dur[c[released]].sum()))}) and took it again ({len(again)} {op_name(alloc_op)}, "
            f"{fmt_ns(float(f.dur[c[again]].sum()))}, {fmt_bytes(float(f.bytes[c[again]].sum()))})",
            f"a warm caching allocator makes no allocation calls; these recur, {rhythm}",
        )
        wall = ctx.pid_span_ns(p)
        summary = (
            f"pid {p} re-acquires freed GPU memory {len(starts)} times: {fmt_ns(lost)} in allocation calls "
            f"({lost / max(wall, 1):.0%} of its wall time)"
        )
        return Finding(
            rule=self.id,
            kind=self.id,
            severity=severity_for(lost, wall),
            symptom=symptom_for(ctx, p, alloc_op, again, summary),
            causes=(Cause(self.id, lines, metrics={"reacquires": len(starts), "period_cv": round(cv, 3)}),),
            fix=_FIX_CHURN,
            lost_ns=lost,
            wall_ns=wall,
        )

    def _spikes(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        out = []
        for p, op, pos in ctx.groups(min_count=10):
            if op not in ALLOC_OPS:
                continue
            d = f.dur[c[pos]]
            base = max(pct(d, 50), 1)
            spikes = pos[(d >= SPIKE_RATIO * base) & (d - base >= 100_000)]
            if len(spikes) < 3:
                continue
            gaps = np.diff(f.ts[c[spikes]])
            cv = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else 1.0
            lost = int((f.dur[c[spikes]] - base).sum())
            wall = ctx.pid_span_ns(p)
            periodic = cv <= 0.5
            if periodic:
                rhythm = f"spikes are periodic: every {fmt_ns(float(np.median(gaps)))} (cv {cv:.2f})"
            else:
                rhythm = f"spikes are irregular (cv {cv:.2f})"
            lines = (
                f"{len(spikes)} of {len(pos)} {op_name(op)} calls ≥ {SPIKE_RATIO:.0f}× p50 ({fmt_ns(base)}), "
                f"p50 of spikes {fmt_ns(pct(f.dur[c[spikes]], 50))}",
                rhythm,
            )
            summary = f"{op_name(op)} of pid {p} spikes {len(spikes)} times, {fmt_ns(lost)} lost"
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=severity_for(lost, wall, pct(f.dur[c[spikes]], 50) / base),
                    symptom=symptom_for(ctx, p, op, pos, summary, whole_op=True),
                    causes=(Cause(self.id, lines, metrics={"spikes": len(spikes), "period_cv": round(cv, 3)}),),
                    fix=_FIX_CHURN,
                    lost_ns=lost,
                    wall_ns=wall,
                )
            )
        return out


class MemoryLeakRule:
    """Allocations without frees: live device memory keeps growing over the window."""

    id = "memory-leak"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        out = []
        if not ctx.frees_recorded:
            return []  # e.g. Ingero imports: no frees recorded, so every allocation would look leaked
        for p in ctx.call_pids:
            if p in ctx.pids_without_frees:
                continue
            sub = c[ctx.pid_calls_of(p, _ALLOC_FREE_OPS)]
            al, fr = _alloc_layer(sub, f.op[sub])
            if len(al) < 10:
                continue
            freed = is_member(f.handle[al], f.handle[fr])
            live = np.cumsum(np.where(freed, 0, f.bytes[al]))
            unfreed = int((~freed).sum())
            # Growth through the process's work: live bytes at its middle call against the end. A caching
            # allocator fills up in the first steps and then stays flat however long the run: that is warm-up,
            # and measured by allocations alone (all of them early) it would look like growth.
            mine = ctx.pid_calls(p)
            mid_ts = f.ts[c[mine[len(mine) // 2]]]  # calls are in time order
            before = int(np.searchsorted(f.ts[al], mid_ts, side="right"))
            live_mid = int(live[before - 1]) if before else 0
            if unfreed < 10 or live_mid <= 0 or live[-1] < 1.8 * live_mid:
                continue
            span_s = max(float(f.ts[al[-1]] - f.ts[al[0]]) / 1e9, 1e-9)
            rate = float(live[-1]) / span_s
            wall = ctx.pid_span_ns(p)
            sev = Severity.HIGH if unfreed / len(al) >= 0.5 and live[-1] >= 2**30 else Severity.MEDIUM
            lines = (
                f"{unfreed} of {len(al)} allocations never freed: {fmt_bytes(float(live[-1]))} live at the end",
                f"growing {fmt_bytes(rate)}/s; live bytes at least doubled between its middle call and the end",
            )
            summary = f"pid {p} leaks device memory: {fmt_bytes(float(live[-1]))} unfreed, {fmt_bytes(rate)}/s"
            cause = Cause(
                self.id,
                lines,
                culprits=(Culprit("allocator", p, comm=f.comm(p)),),
                metrics={"unfreed_allocs": unfreed, "live_bytes": int(live[-1]), "growth_bytes_per_s": int(rate)},
            )
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=sev,
                    symptom=symptom_for(ctx, p, int(f.op[al[0]]), np.flatnonzero(np.isin(c, al)), summary),
                    causes=(cause,),
                    fix="free what you allocate (or drop references so the caching allocator can reuse it); "
                    "look for tensors kept in lists across steps, e.g. accumulating loss without .item()",
                    lost_ns=0,
                    wall_ns=wall,
                )
            )
        return out


__all__ = ["AllocatorChurnRule", "ColdStartRule", "GpuContentionRule", "MemcpyBoundRule", "MemoryLeakRule"]
