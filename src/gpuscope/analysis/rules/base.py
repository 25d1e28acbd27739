"""The Rule protocol and the shared "host cause overlapping calls" analysis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.stats import MIN_AFFECTED, effect_size, latency_histogram, measurable, pct, severity_for
from gpuscope.model.findings import RATIO_FLOOR_NS, Cause, Culprit, Effect, Finding, Span, Symptom
from gpuscope.model.ops import op_name
from gpuscope.model.units import fmt_ns


class Rule(Protocol):
    """One detection: a stable id (also the kind of its findings) and an evaluation over a window."""

    id: str
    # True for a rule whose causes are host intervals (off-CPU time, I/O, memory and network events): on a big
    # window these run on a thread of their own beside the others (gpuscope.analysis.parallel), sharing the
    # per-call overlaps with off-CPU time while the others share the calls grouped by process and op.
    host_side: bool

    def evaluate(self, ctx: Context) -> list[Finding]: ...


@dataclass(frozen=True, slots=True)
class OpEffect:
    pid: int
    op: int
    positions: np.ndarray  # into ctx.calls
    effect: Effect


def effect_line(op: str, e: Effect, cause: str) -> str:
    """The one-line effect-size sentence every causal claim carries."""
    ratio = f"{e.p50_ratio:.0f}×" if e.p50_ratio >= 10 else f"{e.p50_ratio:.1f}×"
    if e.floored:  # a factor over a near-zero baseline says nothing: the excess does
        ratio = f"+{fmt_ns(e.excess_p50_ns)}; {ratio} a {fmt_ns(RATIO_FLOOR_NS)} floor"
    return (
        f"{op}: calls overlapping {cause}: p50 {fmt_ns(e.affected_p50_ns)} vs {fmt_ns(e.unaffected_p50_ns)} "
        f"unaffected ({ratio}); {e.slowest_overlapped} of the {e.slowest_n} slowest calls overlapped; "
        f"{cause} explains {e.excess_share:.0%} of the excess time"
    )


def too_small_to_compare(ctx: Context, affected: np.ndarray, pid: int) -> list[tuple[int, int]]:
    """(op, affected calls) of a process's groups the cause touched too few times for an effect size."""
    out = []
    for gpid, op, pos in ctx.groups():
        n = int(affected[pos].sum())
        if gpid == pid and 0 < n < MIN_AFFECTED:
            out.append((op, n))
    return out


def per_op_effects(ctx: Context, cause_ns: np.ndarray, affected: np.ndarray, pid: int | None = None) -> list[OpEffect]:
    """Effect of a per-call cause on every (pid, op) group; only the measurable ones, biggest first."""
    f, c = ctx.frame, ctx.calls
    out = []
    for gpid, op, pos in ctx.groups():
        if pid is not None and gpid != pid:
            continue
        if not affected[pos].any():
            continue
        e = effect_size(f.dur[c[pos]], affected[pos], cause_ns[pos])
        if measurable(e):
            out.append(OpEffect(gpid, op, pos, e))
    out.sort(key=lambda o: -o.effect.explained_ns)
    return out


def symptom_for(ctx: Context, pid: int, op: int, pos: np.ndarray, summary: str, *, whole_op: bool = False) -> Symptom:
    """The symptom numbers of the calls at ``pos``.

    ``whole_op``: the calls stand for every call of the op (not a chosen few),
    so count and percentiles come from the exact aggregates when there are some.
    """
    agg = ctx.op_summary(pid, op) if whole_op else None
    if agg is not None:
        n, p50, p99, mx, total = agg
        return Symptom(summary, op_name(op), pid, ctx.frame.comm(pid), n, p50, p99, mx, total)
    d = ctx.frame.dur[ctx.calls[pos]]
    return Symptom(
        summary,
        op_name(op),
        pid,
        ctx.frame.comm(pid),
        count=len(d),
        p50_ns=pct(d, 50),
        p99_ns=pct(d, 99),
        max_ns=int(d.max()) if len(d) else 0,
        total_ns=int(d.sum()),
    )


def spread_symptom(
    summary: str, what: str, pid: int, comm: str | None, values: np.ndarray, total_ns: int, count: int | None = None
) -> Symptom:
    """A symptom over measured lengths (gaps, waits, time per launch): how many (``count`` when they stand for
    more), their median, nearest-rank p99 and max, and the time lost in all."""
    return Symptom(
        summary,
        what,
        pid,
        comm,
        len(values) if count is None else count,
        int(np.median(values)),
        pct(values, 99),
        int(values.max()),
        total_ns,
    )


def host_cause_findings(
    ctx: Context,
    rule: str,
    cause_name: str,
    cause_ns: np.ndarray,
    affected: np.ndarray,
    evidence: dict[int, list[str]],
    culprits: dict[int, tuple[Culprit, ...]],
    fix: str,
) -> list[Finding]:
    """One finding per process whose calls a host cause measurably slows, ranked by lost time."""
    findings = []
    effects = per_op_effects(ctx, cause_ns, affected)
    found = {o.pid for o in effects}
    # A process the cause touched too few times for any comparison gets no finding: say so in a note,
    # rather than let "no finding" read as "not affected".
    for pid in sorted({int(p) for p in ctx.frame.pid[ctx.calls[affected]]} - found):
        ctx.too_small.setdefault(rule, []).extend(
            f"pid {pid} {op_name(op)}: {n} call{'s' if n > 1 else ''} overlapping {cause_name}"
            for op, n in too_small_to_compare(ctx, affected, pid)
        )
    for pid in sorted(found):
        mine = [o for o in effects if o.pid == pid]
        top = mine[0]
        lost = sum(o.effect.explained_ns for o in mine)
        wall = ctx.pid_span_ns(pid)
        lines = [effect_line(op_name(o.op), o.effect, cause_name) for o in mine[:3]]
        lines += [
            f"{op_name(op)}: {n} call{'s' if n > 1 else ''} overlapping {cause_name}, too few to compare"
            for op, n in too_small_to_compare(ctx, affected, pid)
        ]
        hit = top.positions[affected[top.positions]]
        cause = Cause(
            rule,
            (*evidence.get(pid, []), *lines),
            top.effect,
            culprits.get(pid, ()),
            histogram=latency_histogram(ctx.frame.dur[ctx.calls[top.positions]], affected[top.positions]),
        )
        e = top.effect
        summary = (
            f"{op_name(top.op)} of pid {pid} is {e.slowdown()} when it overlaps {cause_name}; "
            f"{fmt_ns(lost)} lost ({lost / max(wall, 1):.0%} of its wall time)"
        )
        findings.append(
            Finding(
                rule=rule,
                kind=rule,
                severity=severity_for(lost, wall, e.p50_ratio),
                symptom=symptom_for(ctx, pid, top.op, top.positions, summary, whole_op=True),
                causes=(cause,),
                fix=fix,
                lost_ns=lost,
                wall_ns=wall,
                # From the first affected call of the op it names to the last one's end.
                span=Span(int(ctx.call_start[hit].min()), int(ctx.call_end[hit].max())),
            )
        )
    return findings
