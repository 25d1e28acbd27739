"""What a recording imported from another tool (the reference) adds to a report: its counts and its findings.

The reference stores rows selectively but counts every call: where its own
counts exceed the rows it kept, they give a process's counts, totals and
rates (``with_imported_counts``). Its own findings are set beside gpuscope's,
each with how ours relate to it, never merged into them (``reference_findings``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import numpy as np

from gpuscope.analysis.frame import EventFrame, Window
from gpuscope.analysis.imported_rates import ImportedRates
from gpuscope.analysis.stats import OpStats
from gpuscope.model.findings import Finding, ReferenceFinding
from gpuscope.model.ops import Op
from gpuscope.store.imported_read import imported_chain_rows
from gpuscope.store.sessions_read import session_wall_span


def with_imported_counts(
    stats: list[OpStats], per_process: list[OpStats], imp: ImportedRates, wall: int, spans: dict[int, int]
) -> tuple[list[OpStats], list[OpStats]]:
    """Counts, totals and maxima of the reference's processes from its own exact counts, where they exceed
    what its selectively stored rows hold; percentiles stay those of the rows (a note says so)."""
    extra: dict[str, tuple[int, int, int]] = {}  # op -> what the counts add to the rows, over every process
    fixed = []
    for s in per_process:
        key = (s.pid or 0, int(Op[s.op])) if s.op in Op.__members__ else None
        got = imp.totals.get(key) if key is not None else None
        if got is None or got[0] <= s.count:
            fixed.append(s)
            continue
        n, total, top = got[0], max(got[1], s.total_ns), max(got[2], s.max_ns)
        budget = max(spans.get(s.pid or 0, 0), 1)
        fixed.append(
            replace(s, count=n, total_ns=total, max_ns=top, time_share=total / budget, rate_per_s=n / (budget / 1e9))
        )
        dn, dt, mx = extra.get(s.op, (0, 0, 0))
        extra[s.op] = (dn + n - s.count, dt + total - s.total_ns, max(mx, top))
    budget = max(sum(spans.values()) or wall, 1)
    out = []
    for s in stats:
        if s.op in extra:
            dn, dt, mx = extra[s.op]
            total = s.total_ns + dt
            s = replace(
                s,
                count=s.count + dn,
                total_ns=total,
                max_ns=max(s.max_ns, mx),
                time_share=total / budget,
                rate_per_s=(s.count + dn) / (max(wall, 1) / 1e9),
            )
        out.append(s)
    out.sort(key=lambda s: -s.total_ns)
    return out, fixed


def reference_findings(
    conn: sqlite3.Connection, window: Window, findings: tuple[Finding, ...], frame: EventFrame
) -> tuple[ReferenceFinding, ...]:
    """The reference's stored findings of the window, each with how ours relate to it.

    Its words are shown as its own, never merged into ours: its rules differ
    (a tail ratio against p50 over its stored rows), and where they disagree
    a reader should see both and why.
    """
    w = window
    lo, hi = w.start_ns + w.wall_offset_ns, w.end_ns + w.wall_offset_ns
    # The reference detects while recording and keeps few rows: its findings fall anywhere in its sessions,
    # often outside the stored events. A window over whole sessions takes theirs.
    span = session_wall_span(conn, w.session_ids)
    if span is not None and w.start_ns <= w.recording_start_ns and w.end_ns >= w.recording_end_ns:
        lo, hi = min(lo, span[0]), max(hi, span[1])
    rows = imported_chain_rows(conn, lo, hi)
    out = []
    for rid, node, wall_ns, severity, summary, root_cause, op in rows:
        ours = [i for i, f in enumerate(findings, 1) if op and f.symptom.op == op]
        if ours:
            agreement = f"gpuscope's finding {', '.join(f'#{i}' for i in ours)} is about the same calls"
        elif not op:
            agreement = "names no CUDA op to compare with"
        elif op not in Op.__members__ or not np.any(frame.op == int(Op[op])):
            agreement = f"no {op} call of the window is stored in the file, so gpuscope cannot measure it"
        else:
            agreement = (
                f"gpuscope finds no measurable cause for {op} in this window (`gpuscope docs explain`: a cause must "
                "change the calls it overlaps, not only coincide with them)"
            )
        out.append(ReferenceFinding(rid, node, int(wall_ns), severity, summary, root_cause, op, agreement))
    return tuple(out)
