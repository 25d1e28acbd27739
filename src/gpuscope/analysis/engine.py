"""Run the rule registry over a window of a database and rank the findings.

``explain_db`` is the one entry point commands use: it opens the database
read-only, analyses, and (when asked and possible) appends the findings to
the ``findings`` table through a separate writer connection.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from types import MappingProxyType

import numpy as np

from gpuscope.analysis.attribution import EMPTY, Attribution, load_attribution
from gpuscope.analysis.caveats import counted_by_source, window_caveats, with_caveats
from gpuscope.analysis.context import Context
from gpuscope.analysis.coverage import Coverage, SamplingSummary, load_coverage, with_sampling
from gpuscope.analysis.cpu_profile import CpuSamples, load_cpu_samples
from gpuscope.analysis.frame import (
    BUCKET_NS,
    GPU_CALLS,
    SAMPLED_OPS,
    THIN_SAMPLE,
    Aggregates,
    EventFrame,
    Window,
    load_aggregates,
    load_frame,
    pids_without_frees,
    recording_bounds,
)
from gpuscope.analysis.imported_rates import ImportedRates, load_imported_rates
from gpuscope.analysis.imported_report import reference_findings, with_imported_counts
from gpuscope.analysis.intervals import distinct
from gpuscope.analysis.overhead import NO_TRACER, TracerIdentity, TracerOverhead, identify_tracer, measure_overhead
from gpuscope.analysis.parallel import evaluate
from gpuscope.analysis.recording_state import RecordingState, read_recording_state
from gpuscope.analysis.report_notes import rates_note, stateless_note, too_small_note
from gpuscope.analysis.rules import RULES, Rule
from gpuscope.analysis.stats import OpStats, agg_op_stats, hist_pct, op_stats
from gpuscope.errors import DatabaseError, UsageError
from gpuscope.model.findings import Caveat, Finding, ReferenceFinding, Severity, Span
from gpuscope.model.ops import op_for_symbol
from gpuscope.model.policy import SLOW_FACTOR
from gpuscope.model.session_choice import LAST_RUN, SessionChoice
from gpuscope.model.units import MAX_NS
from gpuscope.recording import open_recording_meanwhile
from gpuscope.store.cpu_samples_read import has_cpu_samples
from gpuscope.store.session_scope import ChosenSessions, choose_sessions
from gpuscope.store.sessions_read import recording_origin_ns, session_wall_offsets
from gpuscope.store.stacks_read import any_call_stacks

# No (pid, op) group read selectively.
_NOT_THINNED: Mapping[tuple[int, int], int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ExplainOptions:
    """What to analyse. ``since_ns`` counts back from the END of the recording, not from now.

    ``from_ns``/``to_ns`` are offsets from the start of the recording (when
    its first session started, as in every command); ``from_wall_ns``/``to_wall_ns`` are Unix times (ns), turned
    into the recording's clock by ``resolve_window``; ``from_end_ns``/``to_end_ns``
    count back from the end of the recording. Give at most one of each group.
    ``sessions``: which sessions (the last run unless given); "the recording" above means them.
    """

    since_ns: int | None = None
    from_ns: int | None = None
    to_ns: int | None = None
    pids: tuple[int, ...] = ()
    min_severity: Severity = Severity.LOW
    from_wall_ns: int | None = None
    to_wall_ns: int | None = None
    from_end_ns: int | None = None
    to_end_ns: int | None = None
    sessions: SessionChoice = LAST_RUN


@dataclass(frozen=True, slots=True)
class Report:
    """Ranked findings and stats of a window.

    ``recording``: how the recording's sessions ended and what each source
    lost (None when analysed without the file); ``caveats``: the sources that
    lost events in the window, which make its stats lower bounds;
    ``overhead``: the tracer's own preemption of traced threads.
    """

    window: Window
    findings: tuple[Finding, ...]
    stats: tuple[OpStats, ...]
    per_process: tuple[OpStats, ...]
    stored: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    stats_from: str = "events"  # "aggregates": exact per-second counts, the same in every storage mode
    recording: RecordingState | None = None
    caveats: tuple[Caveat, ...] = ()
    overhead: TracerOverhead | None = None
    reference: tuple[ReferenceFinding, ...] = ()  # the reference system's own findings, from an imported file
    sampling: SamplingSummary | None = None  # the overhead budget: what was estimated, and gpuscope's own cost

    def as_dict(self, per_process: bool = False) -> dict[str, object]:
        d: dict[str, object] = {
            "window": self.window.as_dict(),
            "findings": [f.as_dict() for f in self.findings],
            "stats": [s.as_dict() for s in self.stats],
            "stats_from": self.stats_from,
            "stored": self.stored,
            "notes": list(self.notes),
            "recording": self.recording.as_dict() if self.recording is not None else None,
            "caveats": [c.as_dict() for c in self.caveats],
            "overhead": self.overhead.as_dict() if self.overhead is not None else None,
            "reference_findings": [r.as_dict() for r in self.reference],
            "sampling": self.sampling.as_dict() if self.sampling is not None else None,
        }
        if per_process:
            d["per_process"] = [s.as_dict() for s in self.per_process]
        return d


def resolve_window(conn: sqlite3.Connection, opts: ExplainOptions, chosen: ChosenSessions | None = None) -> Window:
    """Resolve the analysed interval, in the recording's monotonic clock, within the recording's bounds.

    Wall-clock bounds use the wall-clock offset of the last session (the one
    ``Window.as_dict`` reports ``start_wall_ns`` with).
    """
    lo, hi, offset, sessions = recording_bounds(conn)
    # Offsets count from when the first session started, as in query, export and diff.
    origin = recording_origin_ns(conn)
    origin = lo if origin is None else origin
    if chosen is None:
        chosen = choose_sessions(conn, opts.sessions)
    if not chosen.whole:
        # The chosen sessions' span on the clock of their rows; their own last one's wall offset.
        offset = dict(session_wall_offsets(conn)).get(chosen.ids[-1], offset)
        if chosen.mono_start is not None:
            lo = origin = max(lo, chosen.mono_start)
        if chosen.mono_end is not None:
            hi = min(hi, chosen.mono_end)
        hi = max(lo, hi)
        sessions = chosen.ids
    start, end = lo, hi
    if opts.since_ns is not None:
        start = max(lo, hi - opts.since_ns)
    # --from and --to on the recording's clock, before they are kept within it (one of each form is given).
    from_at = _point(opts.from_ns, opts.from_wall_ns, opts.from_end_ns, origin, offset, hi)
    to_at = _point(opts.to_ns, opts.to_wall_ns, opts.to_end_ns, origin, offset, hi)
    if from_at is not None and to_at is not None and from_at > to_at:
        # Only the recording can tell for an offset against a Unix time (same forms are refused when parsed).
        raise UsageError("--from is after --to in this recording", remedy="give the earlier time to --from")
    if from_at is not None:
        start = max(lo, from_at)
    if to_at is not None:
        end = min(hi, to_at)
    # A bound far past the recording (--from 100000d) stays a time SQLite can compare with, on either clock.
    latest = MAX_NS - max(offset, 0)
    start = min(start, latest)
    part = None if chosen.whole else chosen.part()
    return Window(start, min(max(start, end), latest), lo, hi, offset, sessions, part=part)


def _point(
    offset_ns: int | None, wall_ns: int | None, before_end_ns: int | None, origin: int, offset: int, hi: int
) -> int | None:
    """A --from/--to on the recording's monotonic clock: from its start, a Unix time, or back from its end."""
    if before_end_ns is not None:
        return hi - before_end_ns
    if wall_ns is not None:
        return wall_ns - offset
    if offset_ns is not None:
        return origin + offset_ns
    return None


# Findings that describe a symptom without naming its cause. When a causal
# finding covers the same process, the symptom is its consequence: it is ranked
# below it (one severity level lower) and points at it.
SYMPTOM_ONLY_KINDS = frozenset({"throughput-drop"})


def _rank_consequences(findings: list[Finding]) -> list[Finding]:
    from dataclasses import replace

    from gpuscope.model.findings import Cause

    causal: dict[int, Finding] = {}
    for f in findings:
        pid = f.symptom.pid
        if f.kind in SYMPTOM_ONLY_KINDS or pid is None or f.severity < Severity.MEDIUM:
            continue
        if pid not in causal or f.severity > causal[pid].severity:
            causal[pid] = f
    out = []
    for f in findings:
        c = causal.get(f.symptom.pid) if f.symptom.pid is not None else None
        if f.kind in SYMPTOM_ONLY_KINDS and c is not None:
            sev = Severity(max(min(f.severity, c.severity - 1), Severity.LOW))
            note = Cause("consequence", (f"coincides with {c.kind} of the same process: {c.symptom.summary}",))
            f = replace(f, severity=sev, causes=(*f.causes, note))
        out.append(f)
    return out


def analyse(
    frame: EventFrame,
    window: Window,
    rules: tuple[Rule, ...] = RULES,
    pids: tuple[int, ...] = (),
    min_severity: Severity = Severity.LOW,
    *,
    aggregates: Aggregates | None = None,
    thinned: Mapping[tuple[int, int], int] = _NOT_THINNED,
    frees_recorded: bool = True,
    pids_without_frees: frozenset[int] = frozenset(),
    attribution: Attribution = EMPTY,
    tracer: TracerIdentity = NO_TRACER,
    imported_rates: ImportedRates | None = None,
    threads: int | None = None,
    coverage: Coverage | None = None,
    cpu_samples: CpuSamples | None = None,
) -> Report:
    """Evaluate every rule and rank findings: severity, then time lost.

    With ``aggregates`` the stats (counts, percentiles, shares, rates) and the
    window's event count come from them; otherwise from the rows.
    ``attribution`` (ranks, communicators, containers; ``load_attribution``)
    lets the rules name who a process is; without it they name pids.
    ``tracer`` (``identify_tracer``): the recording agent, whose CPU time is
    reported as overhead and never as a cause. ``threads``: see
    ``parallel.evaluate`` (None: two on a big window where two CPUs are usable).
    """
    ctx = Context(
        frame,
        window,
        pids,
        aggregates=aggregates,
        thinned=thinned,
        frees_recorded=frees_recorded,
        pids_without_frees=pids_without_frees,
        attribution=attribution,
        tracer_pids=tracer.pids,
        imported_rates=imported_rates,
        coverage=coverage,
        cpu_samples=cpu_samples,
    )
    findings = _rank_consequences(evaluate(rules, ctx, threads))
    findings = [
        replace(f, span=_within(window, f.span) if f.span is not None else _symptom_span(ctx, f)) for f in findings
    ]
    findings = [f for f in findings if f.severity >= min_severity]
    findings.sort(key=lambda f: (-f.severity, -f.lost_ns, f.kind))
    c = ctx.calls
    wall = max(window.length_ns, 1)
    per_process: list[OpStats] = []
    # Time shares are of the time the processes had: with several processes making calls at once, shares of
    # the window alone add up to more than 100%.
    if aggregates is not None:
        call_rows = aggregates.mask(None, GPU_CALLS)
        pids = distinct(aggregates.pid[call_rows]).tolist()
        spans = {p: _span_ns(ctx, aggregates, p) for p in pids}
        # Ops probed in windows (the overhead budget) are estimated per process: from its always-probed
        # calls (anchors) where enough fell inside the windows, else from the time the windows covered.
        live, anchors = (ctx.call_spans, ctx.anchors) if coverage is not None else (None, None)
        agg_stats = partial(agg_op_stats, coverage=coverage, spans=live, anchors=anchors)
        stats = agg_stats(aggregates, GPU_CALLS, wall, time_ns=sum(spans.values()) or wall)
        for p in pids:
            per_process.extend(agg_stats(aggregates, GPU_CALLS, spans[p], pid=p))
        n = aggregates.events
    else:
        spans = {p: ctx.pid_span_ns(p) for p in ctx.call_pids}
        stats = op_stats(frame.op[c], frame.dur[c], wall, time_ns=sum(spans.values()) or wall)
        for p in ctx.call_pids:
            m = c[ctx.pid_calls(p)]
            per_process.extend(op_stats(frame.op[m], frame.dur[m], spans[p], pid=p))
        if imported_rates is not None and imported_rates.totals:
            stats, per_process = with_imported_counts(stats, per_process, imported_rates, wall, spans)
        n = int(np.count_nonzero((frame.ts >= window.start_ns) & (frame.ts <= window.end_ns)))
    return Report(
        replace(window, events=n),
        tuple(findings),
        tuple(stats),
        tuple(per_process),
        notes=stateless_note(ctx) + rates_note(ctx) + too_small_note(ctx, rules),
        stats_from="events" if aggregates is None else "aggregates",
        overhead=measure_overhead(ctx, tracer),
    )


def _within(window: Window, span: Span) -> Span | None:
    """A rule's span cut to the window (bins of a rate can reach past it); None when nothing of it is inside."""
    lo, hi = max(span.start_ns, window.start_ns), min(span.end_ns, window.end_ns)
    return Span(lo, hi) if hi > lo else None


def _symptom_span(ctx: Context, f: Finding) -> Span | None:
    """A finding's span when its rule set none: the calls of the op its symptom names (else every call of its
    process) in the window; None for a finding of no process, or of one whose calls the window does not hold."""
    pid = f.symptom.pid
    if pid is None:
        return None
    op = op_for_symbol(f.symptom.op) if f.symptom.op else None
    pos = [p for gpid, gop, p in ctx.groups(min_count=1, warm_only=False) if gpid == pid and gop == op]
    if pos and len(pos[0]):
        lo, hi = int(ctx.call_start[pos[0]].min()), int(ctx.call_end[pos[0]].max())
    elif pid in ctx.call_spans:
        lo, hi = ctx.call_spans[pid]
    else:
        return None
    return _within(ctx.window, Span(lo, hi))


def _span_ns(ctx: Context, aggregates: Aggregates, pid: int) -> int:
    """A process's active time: from its stored calls, else from the seconds its aggregates cover."""
    span = ctx.pid_span_ns(pid)
    if span:
        return span
    b = aggregates.bucket[aggregates.pid == pid]
    lo = max(int(b.min()), ctx.window.start_ns)
    hi = min(int(b.max()) + BUCKET_NS, ctx.window.end_ns)
    return max(hi - lo, 1)


def thin_thresholds(aggregates: Aggregates) -> dict[tuple[int, int], int]:
    """Slow-call thresholds of the high-rate (pid, op) groups whose rows were (nearly) all stored.

    Those are read the way selective storage would have kept them: slow
    calls and a sample. Groups already stored selectively are read whole.
    """
    out: dict[tuple[int, int], int] = {}
    m = aggregates.mask(None, SAMPLED_OPS)
    for pid, op in sorted({(int(p), int(o)) for p, o in zip(aggregates.pid[m], aggregates.op[m], strict=True)}):
        k = m & (aggregates.pid == pid) & (aggregates.op == op)
        count, stored = int(aggregates.count[k].sum()), int(aggregates.stored[k].sum())
        if stored > 1000 + 4 * count // THIN_SAMPLE:
            out[(pid, op)] = int(SLOW_FACTOR * hist_pct(aggregates.hist(pid, op), 50))
    return out


@contextmanager
def reading_events(path: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``path``, closed after; SQLite failures inside become one DatabaseError.

    Raises DatabaseError for a missing, corrupt or unreadable database.
    """
    # A closed file's page check runs beside the reads below (see open_recording_meanwhile).
    conn, check = open_recording_meanwhile(path)
    try:
        yield conn
        check.result()
    except sqlite3.DatabaseError as exc:
        check.result()  # a damaged file is said so in the check's words
        raise DatabaseError(
            f"{path}: cannot read events ({exc})", remedy="check the file is a gpuscope database"
        ) from None
    except Exception:
        # Values gpuscope never writes (text in a time, a blob in a duration) can fail the reads
        # in any way before the check has said so: the check's one line is the answer.
        check.result()
        raise
    finally:
        check.join()
        conn.close()


def explain_db(
    path: str | os.PathLike[str],
    opts: ExplainOptions,
    frames: Callable[[sqlite3.Connection, int, int], EventFrame] | None = None,
) -> Report:
    """Analyse a recording through one read-only connection; the file is never written.

    ``frames(conn, start_ns, end_ns)``: the window's every event, from a reader the caller keeps (the
    dashboard reads a span once for the report and its time views); used when every row is read (no pid
    chosen, nothing thinned).

    Raises DatabaseError for a missing or corrupt database.
    """
    with reading_events(path) as conn:
        chosen = choose_sessions(conn, opts.sessions)
        window = resolve_window(conn, opts, chosen)
        aggregates = load_aggregates(conn, window.start_ns, window.end_ns, opts.pids)
        thin = thin_thresholds(aggregates) if aggregates is not None else {}
        if frames is not None and not opts.pids and not thin:
            frame = frames(conn, window.start_ns, window.end_ns)
        else:
            frame = load_frame(conn, window.start_ns, window.end_ns, opts.pids, thin)
        no_frees = pids_without_frees(conn)
        # Ranks, communicators and containers, for the rules that name them.
        attribution = load_attribution(conn)
        tracer = identify_tracer(conn)
        imported = load_imported_rates(conn, window)
        coverage = load_coverage(conn, window.start_ns, window.end_ns)
        cpu = load_cpu_samples(conn, window.start_ns, window.end_ns, opts.pids) if has_cpu_samples(conn) else None
        report = analyse(
            frame,
            window,
            pids=opts.pids,
            min_severity=opts.min_severity,
            aggregates=aggregates,
            thinned=thin,
            frees_recorded=no_frees is not None,
            pids_without_frees=no_frees or frozenset(),
            attribution=attribution,
            tracer=tracer,
            imported_rates=imported,
            coverage=coverage,
            cpu_samples=cpu,
        )
        report = _with_call_sites(conn, report)
        report = replace(report, reference=reference_findings(conn, report.window, report.findings, frame))
        # Drops are not per process: with --pid the counted events are a subset, so no share is given.
        counted = None if opts.pids else counted_by_source(aggregates)
        try:
            state = read_recording_state(conn, path, window=report.window, counted=counted)
        except sqlite3.DatabaseError as exc:
            raise DatabaseError(
                f"{path}: cannot read its sessions ({exc})", remedy="check the file is a gpuscope database"
            ) from None
        report = with_recording(report, state)
        estimated = tuple(st.op for st in report.stats if st.estimated)
        findings, sampling = with_sampling(conn, report.findings, estimated, coverage, window.start_ns, window.end_ns)
        left_out = chosen.note()
        notes = (left_out, *report.notes) if left_out else report.notes
        return replace(report, findings=findings, sampling=sampling, notes=notes)


def with_recording(report: Report, state: RecordingState) -> Report:
    """The report with the recording's state, and caveats where events of a number's source were lost."""
    return replace(
        report, recording=state, findings=with_caveats(report.findings, state), caveats=window_caveats(state)
    )


def _with_call_sites(conn: sqlite3.Connection, report: Report) -> Report:
    """Name the code behind each finding's slow calls, when stacks were recorded.

    "78% of the slow cudaMalloc calls come from allocate_kv_cache (kv_cache.py:211)"
    is added to the symptom as ``call_sites``.
    """
    if not report.findings:
        return report
    out = []
    try:
        if not any_call_stacks(conn):
            return report
        # Imported only for a recording with stacks: the start-up of every other explain is spared it.
        from gpuscope.stacks.report import describe_call_sites, top_call_sites

        for f in report.findings:
            s = f.symptom
            if s.op and s.pid is not None and s.count:
                # "Slow" = above twice the median; with no spread, every call.
                slow = 2 * s.p50_ns if s.p99_ns > 2 * s.p50_ns else None
                sites = top_call_sites(conn, op=s.op, pid=s.pid, min_duration_ns=slow, limit=3)
                line = describe_call_sites(sites, f"{'slow ' if slow else ''}{s.op} calls")
                if line:
                    f = replace(f, symptom=replace(s, extra={**s.extra, "call_sites": line}))
            out.append(f)
    except sqlite3.DatabaseError:
        return report
    return replace(report, findings=tuple(out))
