"""Render an explain report for a terminal: findings first, then a compact stats summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscope.model.findings import Severity
from gpuscope.model.units import fmt_ns

if TYPE_CHECKING:
    from gpuscope.analysis.engine import Report
    from gpuscope.analysis.stats import OpStats


def _stats_table(rows: tuple[OpStats, ...] | list[OpStats], limit: int = 12) -> list[str]:
    out = [f"  {'op':<24} {'count':>9} {'p50':>10} {'p95':>10} {'p99':>10} {'max':>10} {'time':>6}"]
    for s in list(rows)[:limit]:
        out.append(
            f"  {s.op:<24} {s.count:>9,} {fmt_ns(s.p50_ns):>10} {fmt_ns(s.p95_ns):>10} "
            f"{fmt_ns(s.p99_ns):>10} {fmt_ns(s.max_ns):>10} {s.time_share:>6.1%}"
        )
    return out


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
    return lines


def _stats_caveats(report: Report) -> list[str]:
    """The caveats of the CUDA call tables: host drops do not touch them."""
    return [f"  caveat: {c.text}" for c in report.caveats if c.source != "host"]


def render_report(report: Report, per_process: bool = False) -> str:
    w = report.window
    lines = [
        f"Window: {fmt_ns(w.length_ns)} ({w.events:,} events) ending "
        f"{fmt_ns(w.recording_end_ns - w.end_ns)} before the end of the recording"
    ]
    lines.extend(_recording_lines(report))
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    if report.findings:
        summary = ", ".join(f"{n} {s.name}" for s, n in sorted(counts.items(), reverse=True) if n)
        lines.append(f"{len(report.findings)} finding(s): {summary}")
    else:
        lines.append("no findings")
    for i, f in enumerate(report.findings, 1):
        lines.append("")
        lines.append(f"{i}. [{f.severity.name}] {f.kind}: {f.symptom.summary}")
        s = f.symptom
        if s.op:
            lines.append(
                f"   symptom: {s.op} x{s.count:,}  p50 {fmt_ns(s.p50_ns)}  p99 {fmt_ns(s.p99_ns)}  "
                f"max {fmt_ns(s.max_ns)}"
            )
        if s.extra.get("call_sites"):
            lines.append(f"   where: {s.extra['call_sites']}")
        for c in f.causes:
            for ev in c.evidence:
                lines.append(f"   - {ev}")
        lines.extend(f"   caveat: {c.text}" for c in f.caveats)
        lines.append(f"   fix: {f.fix}")
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
