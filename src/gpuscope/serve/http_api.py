"""The JSON API over one recording: each endpoint is a typed read through the same core as the CLI.

``Api``'s methods take typed arguments (``since_ns``, ``pid``,
``min_severity``…) and return plain dicts; the MCP server calls them as they
are, and ``gpuscope.serve.endpoints`` maps the GET endpoints onto them. Nothing
here writes: SQL runs on the guarded read-only reader of ``gpuscope query``,
every other read on a read-only connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpuscope._version import __version__
from gpuscope.analysis.collectives import DEFAULT_LIMIT as COLLECTIVES_DEFAULT
from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.diff import diff_databases
from gpuscope.errors import GpuscopeError
from gpuscope.model.findings import Severity
from gpuscope.model.session_choice import LAST_RUN, SessionChoice
from gpuscope.query.filters import EventFilter
from gpuscope.query.guard import MiB
from gpuscope.query.guarded import ResultLimits, open_reader
from gpuscope.recording.open import open_recording
from gpuscope.serve.cache import ReportCache
from gpuscope.serve.params import DEFAULT_ROWS, QUERY_TIMEOUT_S
from gpuscope.serve.profile import profile_speedscope, profile_summary
from gpuscope.serve.time_views import TimeViews
from gpuscope.serve.untrusted import json_scalar
from gpuscope.stacks.report import top_stacks
from gpuscope.store import dashboard_read as store
from gpuscope.store.connect import file_signature

# What one POST /query may fetch: an answer is built whole before it is sent, and many may be built at once.
QUERY_LIMITS = ResultLimits(value_bytes=4 * MiB, result_bytes=16 * MiB)
PROFILE_DEFAULT = 10  # functions and stacks in one profile
NO_BASELINE = "no baseline: start the dashboard with --baseline PATH (a recording of the run before) to compare"


# What the page asks for first (its session selector's default, sent as given): the head start computes that.
PAGE_SESSIONS = SessionChoice.parse("last")


class Api(TimeViews):
    """The reads behind /api/v1 for the recording at ``db`` (the time views: ``TimeViews``).

    ``pid`` arguments are checked by the callers (``params.PID``: the HTTP
    layer, MCP's tools); ``None`` means every process, every window, no bound.
    """

    def __init__(self, db: Path, *, baseline: Path | None = None) -> None:
        super().__init__()
        self.db = db
        self.baseline = baseline
        self._diffs = ReportCache(size=2)
        # overview, ops and findings are views of one explain: a page refresh asks for all three at once.
        self._reports = ReportCache()
        # The page asks for the profile on every refresh: read again only when the recording changed.
        self._profiles = ReportCache(size=8)
        self._processes = ReportCache(size=4)

    def _explain(
        self,
        since_ns: int | None,
        pid: int | None,
        min_severity: Severity = Severity.LOW,
        sessions: SessionChoice = LAST_RUN,
    ) -> Any:
        pids = (pid,) if pid is not None else ()
        opts = ExplainOptions(since_ns=since_ns, pids=pids, min_severity=min_severity, sessions=sessions)
        return self._reports.get(
            opts, file_signature(self.db), lambda: explain_db(self.db, opts, frames=self.whole_frame)
        )

    def warm(self, first_screen: threading.Event | None = None) -> None:
        """Run one query: its first run imports and opens what the requests need (a bad recording is theirs to report).

        Then, on threads, compute what the page's first screen asks for (the last run's report; the events of
        its span, their timeline and the lanes' intervals, which any width the page asks for reduces cheaply):
        a page opened a moment after the server started finds them ready or in progress (a request for one
        being computed waits for it, never computes it twice). ``first_screen`` is set once they are done.
        """
        try:
            self.query(store.TRIVIAL_QUERY, 1)
        except GpuscopeError:
            if first_screen is not None:
                first_screen.set()
            return
        # Two threads: the report and the events are read apart, and much of each runs outside the GIL.
        parts = [
            threading.Thread(target=_head_start, args=(part,), name="gpuscope-first-screen", daemon=True)
            for part in (
                lambda: self._explain(None, None, sessions=PAGE_SESSIONS),
                lambda: self.time_views_ahead(PAGE_SESSIONS),
            )
        ]
        for thread in parts:
            thread.start()
        if first_screen is not None:
            threading.Thread(
                target=_when_done, args=(parts, first_screen), name="gpuscope-first-screen", daemon=True
            ).start()

    # -- endpoints -------------------------------------------------------------------------------------------------

    def time(self) -> dict[str, Any]:
        return {"timestamp_ns": time.time_ns()}

    def overview(
        self, since_ns: int | None = None, pid: int | None = None, sessions: SessionChoice = LAST_RUN
    ) -> dict[str, Any]:
        d = self._explain(since_ns, pid, sessions=sessions).as_dict()
        every = self.read(store.sessions_brief)
        top = d["findings"][0] if d["findings"] else None
        return {
            "version": __version__,
            "recording": str(self.db),
            "baseline": str(self.baseline) if self.baseline is not None else None,
            "sessions": every,
            "nodes": sorted({s["node"] for s in every if s["node"]}),
            "window": d["window"],
            "events": d["window"]["events"],
            "recording_state": d.get("recording"),
            "finding_counts": _counts(f["severity"] for f in d["findings"]),
            "top_finding": top,
            "notes": d["notes"],
            "sampling": d.get("sampling"),
        }

    def ops(
        self, since_ns: int | None = None, pid: int | None = None, sessions: SessionChoice = LAST_RUN
    ) -> dict[str, Any]:
        d = self._explain(since_ns, pid, sessions=sessions).as_dict()
        return {"window": d["window"], "ops": d["stats"], "notes": d["notes"], "sampling": d.get("sampling")}

    def findings(
        self,
        since_ns: int | None = None,
        pid: int | None = None,
        min_severity: Severity = Severity.LOW,
        sessions: SessionChoice = LAST_RUN,
    ) -> dict[str, Any]:
        d = self._explain(since_ns, pid, min_severity, sessions).as_dict()
        return {
            "window": d["window"],
            "findings": d["findings"],
            "reference_findings": d["reference_findings"],
            "notes": d["notes"],
            "caveats": d["caveats"],
        }

    def processes(self, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        rows = self._processes.get(limit, file_signature(self.db), lambda: self.read(store.process_rows, limit))
        return {"processes": rows}

    def containers(self, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        return {"containers": self.read(store.container_rows, limit)}

    def stacks(
        self, op: str | None = None, pid: int | None = None, min_duration_ns: int | None = None, limit: int = 10
    ) -> dict[str, Any]:
        conn = open_recording(self.db)
        try:
            found = top_stacks(conn, op=op, pid=pid, min_duration_ns=min_duration_ns, limit=limit)
        finally:
            conn.close()
        return {
            "stacks": [
                {
                    "op": s.op,
                    "calls": s.calls,
                    "share": round(s.share, 4),
                    "total_duration_ns": s.total_duration_ns,
                    "call_site": s.call_site,
                    "frames": [f.render() for f in s.frames],
                    "marker": s.marker,
                }
                for s in found
            ]
        }

    def profile(
        self,
        since_ns: int | None = None,
        pid: int | None = None,
        limit: int = PROFILE_DEFAULT,
        sessions: SessionChoice = LAST_RUN,
    ) -> dict[str, Any]:
        """Where the traced threads' CPU time went: hot functions and stacks, by on-CPU samples (estimates)."""
        found: dict[str, Any] = self._profiles.get(
            (pid, since_ns, limit, sessions),
            file_signature(self.db),
            lambda: self.read(profile_summary, pid=pid, since_ns=since_ns, limit=limit, sessions=sessions),
        )
        return found

    def profile_speedscope(
        self, since_ns: int | None = None, pid: int | None = None, sessions: SessionChoice = LAST_RUN
    ) -> dict[str, Any]:
        """The same samples as a speedscope file: one sampled profile per thread."""
        doc: dict[str, Any] = self.read(
            profile_speedscope, pid=pid, since_ns=since_ns, name=f"{self.db.name}: on-CPU samples", sessions=sessions
        )
        return doc

    def events(
        self,
        after: int = 0,
        op: str | None = None,
        pid: int | None = None,
        from_wall_ns: int | None = None,
        to_wall_ns: int | None = None,
        limit: int = DEFAULT_ROWS,
    ) -> dict[str, Any]:
        """A page of events in id order: ``after`` the last id of the previous page (keyset paging).

        ``from_wall_ns``/``to_wall_ns``: Unix times (ns), inclusive.
        """
        rows = self.read(
            store.events_page,
            after=after,
            limit=limit + 1,
            op=op,
            pid=pid,
            from_wall_ns=from_wall_ns,
            to_wall_ns=to_wall_ns,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return {"events": rows, "next_after": rows[-1]["id"] if more and rows else None}

    def diff(self) -> dict[str, Any]:
        """The recording against the baseline it is served with, per op (``gpuscope diff BASELINE --db DB``); with
        no baseline, an empty comparison whose note says how to get one."""
        baseline = self.baseline
        if baseline is None:
            return {
                "baseline": None,
                "recording": str(self.db),
                "ops": [],
                "notes": [NO_BASELINE],
            }
        signature = (file_signature(baseline), file_signature(self.db))
        found: dict[str, Any] = self._diffs.get(
            "diff", signature, lambda: diff_databases(baseline, self.db, with_findings=True).as_dict()
        )
        return {"baseline": str(baseline), "recording": str(self.db), **found}

    def graph_events(self, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        return {"graph_events": self.read(store.graph_event_rows, limit)}

    def graph_metrics(self) -> dict[str, Any]:
        rows = self.read(store.graph_op_rows)
        for r in rows:
            span = (r["last_wall_ns"] or 0) - (r["first_wall_ns"] or 0)
            r["rate_per_s"] = round(r["count"] / (span / 1e9), 3) if span > 0 else None
        return {"ops": rows}

    def snapshots(self, since_ns: int | None = None, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        """The host once a second (CPU, memory, load, swap): recorded by trace, or an Ingero import's samples."""
        rows = self.read(store.system_sample_rows, None, limit)
        if rows:
            if since_ns is not None:
                rows = [r for r in rows if r["wall_ns"] >= rows[-1]["wall_ns"] - since_ns]
            return {"snapshots": rows, "source": "recorded"}
        rows = self.read(store.imported_snapshot_rows, limit)
        if rows:
            return {"snapshots": rows, "source": "imported"}
        return {"snapshots": [], "note": "this recording holds no system samples (recorded before gpuscope kept them)"}

    def collectives(
        self,
        since_ns: int | None = None,
        pid: int | None = None,
        limit: int = COLLECTIVES_DEFAULT,
        sessions: SessionChoice = LAST_RUN,
    ) -> dict[str, Any]:
        """Each NCCL rank's collective calls, with its host activity before each (for cross-node stragglers)."""
        from gpuscope.analysis.collectives import collective_calls

        opts = ExplainOptions(since_ns=since_ns, pids=(pid,) if pid is not None else (), sessions=sessions)
        return collective_calls(self.db, opts, limit)

    def capabilities(self) -> dict[str, Any]:
        sources = self.read(store.source_counts)
        items = [{"id": s, "label": s, "available": n > 0, "events": n} for s, n in sorted(sources.items())]
        items.append({"id": "stacks", "label": "call stacks", "available": self.read(store.has_call_stacks)})
        for planned in ("gpu_utilization (NVML)", "sm_efficiency (CUPTI)", "nvlink (DCGM)"):
            items.append({"id": planned.split(" ")[0], "label": planned, "available": False, "planned": True})
        return {"capabilities": items}

    def query(
        self,
        sql: str,
        limit: int = DEFAULT_ROWS,
        event_filter: EventFilter | None = None,
        timeout_s: float = QUERY_TIMEOUT_S,
    ) -> dict[str, Any]:
        """One read-only statement, at most ``limit`` rows of it, over the events ``event_filter`` keeps.

        ``timeout_s`` is capped at the server's ``QUERY_TIMEOUT_S``.
        """
        with open_reader(
            self.db,
            event_filter=event_filter or EventFilter(),
            timeout_s=min(timeout_s, QUERY_TIMEOUT_S),
            limits=QUERY_LIMITS,
        ) as reader:
            result = reader.query(sql)
            try:
                rows: list[list[Any]] = []
                for row in result.rows:
                    if len(rows) == limit:
                        return {"columns": result.columns, "rows": rows, "truncated": True}
                    rows.append([json_scalar(v) for v in row])
            finally:
                result.close()
        return {"columns": result.columns, "rows": rows, "truncated": False}


def _when_done(threads: list[threading.Thread], done: threading.Event) -> None:
    for thread in threads:
        thread.join()
    done.set()


def _head_start(compute: Callable[[], object]) -> None:
    """Compute what a request will soon ask for; errors are left to that request to report."""
    try:
        compute()
    except Exception:  # only a head start: the request that asks reports its own error
        pass


def _counts(severities: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in severities:
        out[s] = out.get(s, 0) + 1
    return out
