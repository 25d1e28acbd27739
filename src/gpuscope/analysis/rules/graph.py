"""CUDA Graph rules: graphs captured and instantiated again and again instead of being replayed.

Capturing a set of graphs up front (one per batch size, as serving engines
do) is the intended use; what costs is capturing *after* the process has
started replaying graphs, typically because a shape changed (a new batch
size, a new sequence length) and the graph is rebuilt. The analysis needs no
graph handles: a capture or instantiation that starts after the process's
first graph launch is a re-capture.
"""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.intervals import distinct
from gpuscope.analysis.stats import severity_for
from gpuscope.model.findings import Cause, Finding, Severity, Symptom
from gpuscope.model.ops import Op
from gpuscope.model.units import fmt_ns

BEGIN = (int(Op.cudaStreamBeginCapture), int(Op.cuStreamBeginCapture))
END = (int(Op.cudaStreamEndCapture), int(Op.cuStreamEndCapture))
INSTANTIATE = (int(Op.cudaGraphInstantiate), int(Op.cuGraphInstantiate))
UPDATE = (int(Op.cudaGraphExecUpdate), int(Op.cuGraphExecUpdate))
LAUNCH = (int(Op.cudaGraphLaunch), int(Op.cuGraphLaunch))
MIN_RECAPTURES = 3


def _ops(ctx: Context, pid: int, ops: tuple[int, ...]) -> np.ndarray:
    rows: np.ndarray = ctx.calls[ctx.pid_calls_of(pid, frozenset(ops))]
    return rows


def capture_time_ns(ctx: Context, begins: np.ndarray, ends: np.ndarray) -> int:
    """Time inside capture windows: each EndCapture back to the latest BeginCapture of its thread."""
    f = ctx.frame
    total = 0
    for tid in distinct(f.tid[ends]).tolist():
        b = np.sort(f.ts[begins[f.tid[begins] == tid]])
        e = ends[f.tid[ends] == tid]
        if len(b) == 0:
            continue
        i = np.searchsorted(b, f.ts[e], side="right") - 1
        ok = i >= 0
        total += int(((f.ts[e] + f.dur[e])[ok] - b[i[ok]]).sum())
    return total


class GraphRecaptureRule:
    """Graphs re-captured or re-instantiated after replay started (e.g. on every batch-size change)."""

    id = "graph-recapture"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f = ctx.frame
        out = []
        for pid in ctx.call_pids:
            launches = _ops(ctx, pid, LAUNCH)
            if len(launches) == 0:
                continue
            first_launch = int(f.ts[launches].min())
            begins, ends = _ops(ctx, pid, BEGIN), _ops(ctx, pid, END)
            inst, upd = _ops(ctx, pid, INSTANTIATE), _ops(ctx, pid, UPDATE)
            late_ends = ends[f.ts[ends] > first_launch]
            late_inst = inst[f.ts[inst] > first_launch]
            recaptures = max(len(late_ends), len(late_inst))
            if recaptures < MIN_RECAPTURES:
                continue
            late_begins = begins[f.ts[begins] > first_launch]
            cost = capture_time_ns(ctx, late_begins, late_ends) + int(f.dur[late_inst].sum())
            wall = ctx.pid_span_ns(pid)
            per_launch = len(late_inst) / len(launches)
            times = np.sort(f.ts[late_inst if len(late_inst) >= len(late_ends) else late_ends])
            period = int(np.median(np.diff(times))) if len(times) > 1 else 0
            sev = severity_for(cost, wall)
            if per_launch >= 0.5:
                sev = max(sev, Severity.MEDIUM)  # a graph built for (almost) every replay saves nothing
            comm = f.comm(pid)
            summary = (
                f"pid {pid} re-captured {len(late_ends)} and re-instantiated {len(late_inst)} graphs after "
                f"replay started ({len(launches)} graph launches, {per_launch:.2f} instantiations per launch); "
                f"{fmt_ns(cost)} in capture and instantiation"
            )
            evidence = [
                f"{len(begins)} captures and {len(inst)} instantiations in all, {len(late_inst)} of them after the "
                f"first graph launch at +{fmt_ns(first_launch - ctx.window.start_ns)}",
                f"capture + instantiation after replay started: {fmt_ns(cost)} ({cost / max(wall, 1):.1%} of the "
                "process's wall time)",
            ]
            if period:
                evidence.append(f"a new graph every {fmt_ns(period)} (median)")
            if len(upd):
                evidence.append(f"{len(upd)} cudaGraphExecUpdate calls: some changes are already applied in place")
            metrics: dict[str, float | int] = {
                "recaptures": recaptures,
                "instantiations_after_replay": len(late_inst),
                "launches": len(launches),
                "cost_ns": cost,
                "period_ns": period,
            }
            sym = Symptom(summary, "cudaGraphInstantiate", pid, comm, len(inst), extra={"recaptures": recaptures})
            fix = (
                "capture one graph per shape up front and replay it: pad batches to a few fixed sizes (buckets), "
                "keep tensors static (torch.cuda.graphs / torch.compile mode='reduce-overhead' with dynamic=False), "
                "and apply parameter changes with cudaGraphExecUpdate instead of re-instantiating"
            )
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=sev,
                    symptom=sym,
                    causes=(Cause(self.id, tuple(evidence), metrics=metrics),),
                    fix=fix,
                    lost_ns=cost,
                    wall_ns=wall,
                )
            )
        return out


__all__ = ["GraphRecaptureRule"]
