"""Render an explain report for a terminal: findings first, then a compact stats summary.

A finding is rendered by ``finding_lines`` alone, whether it is the local
recording's or one node's of a fleet (``explain --nodes``, tagged with its node).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuscope.model.findings import Finding, NodeFinding, Severity
from gpuscope.model.units import fmt_ns

if TYPE_CHECKING:
    from gpuscope.analysis.engine import Report
    from gpuscope.analysis.frame import Window
    from gpuscope.analysis.stats import OpStats

# Below this the window's ends are shown to the millisecond: "06:58:52–06:58:53" says little of a 300 ms window.
_MS_BELOW_NS = 10_000_000_000
# A wall-clock start before 1973 is no recording's: a window without a session clock (an empty file).
_WALL_MIN_NS = 100_000_000_000_000_000


def _stats_table(rows: tuple[OpStats, ...] | list[OpStats], limit: int = 12) -> list[str]:
    out = [f"  {'op':<24} {'count':>9} {'p50':>10} {'p95':>10} {'p99':>10} {'max':>10} {'time':>6}"]
    for s in list(rows)[:limit]:
        count = f"≈{s.count:,}" if s.estimated else f"{s.count:,}"
        out.append(
            f"  {s.op:<24} {count:>9} {fmt_ns(s.p50_ns):>10} {fmt_ns(s.p95_ns):>10} "
            f"{fmt_ns(s.p99_ns):>10} {fmt_ns(s.max_ns):>10} {s.time_share:>6.1%}"
        )
    estimated = [s for s in list(rows)[:limit] if s.estimated]
    if estimated:
        cov = min(s.coverage or 0.0 for s in estimated)
        out.append(
            f"  ≈ estimated: {', '.join(s.op for s in estimated)} probed {cov:.1%} of the time (overhead budget); "
            "counts, time and rates from those windows, percentiles from the calls seen (--record-all: exact)"
        )
    return out


def _self_cost_lines(report: Report) -> list[str]:
    """gpuscope's measured cost to each traced process, against its budget."""
    s = report.sampling
    if s is None:
        return []
    # A session whose calibration failed measured nothing: say so, not nothing.
    out = [f"gpuscope's own cost: not measured ({why})" for why in s.unmeasured]
    if not s.self_costs:
        return out
    parts = []
    for c in sorted(s.self_costs, key=lambda c: -c.share)[:4]:
        if not c.budget:
            parts.append(f"{c.share:.2%} of pid {c.pid}'s CPU time, no budget (every call probed)")
            continue
        steady = c.budgeted_share
        # A process traced only in its first seconds (probed whole, on purpose) was never under its budget:
        # its cost says so rather than stand beside the budget as if it overran it.
        after = (
            f"; {steady:.2%} after its first seconds"
            if steady is not None
            else ", all in its first seconds, probed whole (`trace --keep-first`)"
        )
        parts.append(f"{c.share:.2%} of pid {c.pid}'s CPU time{after} (budget {c.budget:.1%})")
    more = f" (+{len(s.self_costs) - 4} more processes)" if len(s.self_costs) > 4 else ""
    return [*out, f"gpuscope's own cost (measured): {'; '.join(parts)}{more}"]


def _recording_lines(report: Report) -> list[str]:
    """How the recording ended, what it lost (with the measured fix) and what tracing itself cost."""
    lines: list[str] = []
    rec = report.recording
    if rec is not None:
        lines.extend(f"Recording: {note}" for note in rec.notes())
        if rec.advice:
            lines.append(f"  fix: {rec.advice}")
    o = report.overhead
    if o is not None and o.preempted_ns > 0:
        pids = ", ".join(str(p) for p in sorted(o.tracer.pids))
        how = ", recognised by its name" if o.tracer.found_by != "sessions" else ""
        lines.append(
            f"Tracer overhead: gpuscope itself (pid {pids}{how}) kept the traced threads off their CPU for "
            f"{fmt_ns(o.preempted_ns)} ({o.share:.0%} of the time they were preempted; {fmt_ns(o.in_calls_ns)} "
            "inside CUDA calls): the measured cost of recording, not a cause"
        )
    lines.extend(_self_cost_lines(report))
    return lines


def _stats_caveats(report: Report) -> list[str]:
    """The caveats of the CUDA call tables: host drops do not touch them."""
    return [f"  caveat: {c.text}" for c in report.caveats if c.source != "host"]


def _dur(ns: int) -> str:
    """A duration with its unit, zero included ("0 s", where ``fmt_ns`` says "0")."""
    return fmt_ns(ns) if ns > 0 else "0 s"


def wall_span(start_wall_ns: int, end_wall_ns: int) -> str:
    """``2026-01-02 06:58:52–06:59:23 UTC``: the date once, and again at the end when the span crosses midnight.

    Times are rounded to the second, or to the millisecond for spans under 10 s.
    """
    unit = 1_000_000 if end_wall_ns - start_wall_ns < _MS_BELOW_NS else 1_000_000_000

    def at(wall_ns: int) -> tuple[dt.datetime, str]:
        rounded = (wall_ns + unit // 2) // unit * unit
        t = dt.datetime.fromtimestamp(rounded // 1_000_000_000, tz=dt.timezone.utc)
        ms = f".{rounded // 1_000_000 % 1000:03d}" if unit < 1_000_000_000 else ""
        return t, f"{t:%H:%M:%S}{ms}"

    (start, start_text), (end, end_text) = at(start_wall_ns), at(end_wall_ns)
    if start.date() == end.date():
        return f"{start:%Y-%m-%d} {start_text}–{end_text} UTC"
    return f"{start:%Y-%m-%d} {start_text} – {end:%Y-%m-%d} {end_text} UTC"


def _placement(w: Window) -> str:
    """Where the window lies in what was read, in durations from its ends ("the whole recording" when it is).

    What was read is the recording, or the sessions chosen from it ("the whole session 3").
    """
    after_start = w.start_ns - w.recording_start_ns
    before_end = w.recording_end_ns - w.end_ns
    part = w.part or "the recording"
    whole = part.removeprefix("the ")
    if w.length_ns == 0 and w.start_ns >= w.recording_end_ns > w.recording_start_ns:
        return f"after the end of {part}"
    if before_end <= 0:
        return f"the whole {whole}" if after_start <= 0 else f"the last {_dur(w.length_ns)} of {part}"
    if after_start <= 0:
        start = f"from the start of {part}"
    else:
        start = f"starting {_dur(after_start)} after the start of {part}"
    return f"{start}, ending {_dur(before_end)} before its end"


def window_line(w: Window) -> str:
    """The report's first line: when the window is on the wall clock, how long, how many events, where it lies."""
    start_wall = w.start_ns + w.wall_offset_ns
    when = f"{wall_span(start_wall, w.end_ns + w.wall_offset_ns)} " if start_wall >= _WALL_MIN_NS else ""
    return f"Window: {when}({_dur(w.length_ns)}, {w.events:,} events): {_placement(w)}"


def _severity_counts(findings: Sequence[Finding]) -> str:
    """``2 HIGH, 1 LOW``: how many findings of each severity, the worst first."""
    counts = {s: sum(1 for f in findings if f.severity is s) for s in Severity}
    return ", ".join(f"{n} {s.name}" for s, n in sorted(counts.items(), reverse=True) if n)


def finding_lines(number: int, f: Finding, node: str | None = None) -> list[str]:
    """One finding as text: its rank, severity, kind and summary, the symptom, the evidence, caveats and fix.

    ``node``: the fleet node it came from, shown before its kind (``[HIGH] gpu-1:8443: cpu-preemption: …``).
    """
    s = f.symptom
    lines = [f"{number}. [{f.severity.name}] {f'{node}: ' if node else ''}{f.kind}: {s.summary}"]
    if s.op:
        lines.append(
            f"   symptom: {s.op} x{s.count:,}  p50 {fmt_ns(s.p50_ns)}  p99 {fmt_ns(s.p99_ns)}  max {fmt_ns(s.max_ns)}"
        )
    if s.extra.get("call_sites"):
        lines.append(f"   where: {s.extra['call_sites']}")
    lines.extend(f"   - {ev}" for ev in f.evidence_lines())
    lines.extend(f"   caveat: {c.text}" for c in f.caveats)
    lines.append(f"   fix: {f.fix}")
    return lines


def render_report(report: Report, per_process: bool = False) -> str:
    lines = [window_line(report.window)]
    lines.extend(_recording_lines(report))
    if report.findings:
        lines.append(f"{len(report.findings)} finding(s): {_severity_counts(report.findings)}")
    else:
        lines.append("no findings")
    for i, f in enumerate(report.findings, 1):
        lines.append("")
        lines.extend(finding_lines(i, f))
    if report.reference:
        lines.append("")
        lines.append(
            f"The reference system's own findings, stored in this file ({len(report.reference)}; its words, not gpuscope's):"
        )
        for r in report.reference:
            lines.append(f"  [{r.severity or '?'}] {r.summary}")
            if r.root_cause and r.root_cause not in r.summary:
                lines.append(f"     root cause (reference): {r.root_cause}")
            lines.append(f"     gpuscope: {r.agreement}")
    if report.stats:
        lines.append("")
        lines.append("CUDA API summary:")
        lines.extend(_stats_table(report.stats))
        lines.extend(_stats_caveats(report))
    if per_process and report.per_process:
        lines.append("")
        lines.append("Per process:")
        for pid in sorted({s.pid for s in report.per_process if s.pid is not None}):
            rows = [s for s in report.per_process if s.pid == pid]
            lines.append(f" pid {pid}: {sum(r.count for r in rows):,} calls")
            lines.extend(_stats_table(rows))
        lines.extend(_stats_caveats(report))
        pids = {s.pid for s in report.per_process}
        if len(pids) > 1:
            lines.append(f" {len(pids)} processes share the GPU (see gpu-contention findings for the effect)")
    return "\n".join(lines)


def render_fleet_findings(findings: Sequence[NodeFinding]) -> str:
    """Findings from several nodes (``explain --nodes``) in their order, each as a local one with its node."""
    if not findings:
        return "no findings on any node"
    counts = _severity_counts([f.finding for f in findings])
    lines = [f"{len(findings)} finding(s) across the nodes: {counts}"]
    for i, f in enumerate(findings, 1):
        lines.append("")
        lines.extend(finding_lines(i, f.finding, f.node))
    return "\n".join(lines)
