"""The JSON API over one recording: each endpoint is a typed read through the same core as the CLI.

Endpoints take their parameters from the query string (``since``, ``pid``,
``op``, ``limit``…), parsed by the CLI's own parsers, and return plain dicts;
``gpuscope.serve.app`` turns errors into the one error shape. Nothing here
writes: SQL runs on the guarded read-only reader of ``gpuscope query``, every
other read on a read-only connection.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope._version import __version__
from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.errors import GpuscopeError, UsageError
from gpuscope.model.findings import Severity
from gpuscope.model.units import DURATION_FORMS, parse_duration_ns
from gpuscope.query.filters import EventFilter, parse_time
from gpuscope.query.guard import MiB
from gpuscope.query.guarded import ResultLimits, open_reader
from gpuscope.recording.open import open_recording
from gpuscope.serve.profile import profile_speedscope, profile_summary
from gpuscope.serve.untrusted import json_scalar
from gpuscope.stacks.report import top_stacks
from gpuscope.store import dashboard_read as store
from gpuscope.store.connect import file_signature

MAX_ROWS = 10_000  # rows in one answer (query, events): the page stays small, the server responsive
DEFAULT_ROWS = 1_000
QUERY_TIMEOUT_S = 5.0
# What one POST /query may fetch: an answer is built whole before it is sent, and many may be built at once.
QUERY_LIMITS = ResultLimits(value_bytes=4 * MiB, result_bytes=16 * MiB)
INT64_MAX = 2**63 - 1
MAX_PIDS = 1000  # in one query's filter (each is a bound parameter of its views)

Params = Mapping[str, str]
Handler = Callable[["Api", Params], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One GET endpoint: its path under /api/v1, what it returns, and its query parameters (name -> meaning).

    ``download``: the answer is a file to save, named after the recording with this suffix.
    """

    path: str
    summary: str
    params: dict[str, str]
    handler: Handler
    download: str | None = None


def _since(params: Params) -> int | None:
    text = params.get("since")
    if not text:
        return None
    try:
        return parse_duration_ns(text)
    except ValueError:
        raise UsageError(f"since={text}: not a duration ({DURATION_FORMS})") from None


def _int(params: Params, name: str, *, default: int | None = None, lo: int = 0, hi: int = INT64_MAX) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{name}={text}: not an integer") from None
    if not lo <= value <= hi:
        raise UsageError(f"{name}={text}: must be between {lo} and {hi}")
    return value


def _limit(params: Params) -> int:
    return int(_int(params, "limit", default=DEFAULT_ROWS, lo=1, hi=MAX_ROWS) or DEFAULT_ROWS)


class Api:
    """The reads behind /api/v1 for the recording at ``db``."""

    def __init__(self, db: Path) -> None:
        self.db = db
        # overview, ops and findings are views of one explain: a page refresh asks for all three at once.
        self._reports = ReportCache()
        # The page asks for the profile on every refresh: read again only when the recording changed.
        self._profiles = ReportCache(size=8)

    def _explain(self, params: Params) -> Any:
        pid = _int(params, "pid", lo=0)
        try:
            min_sev = Severity.parse(params.get("min_severity") or "low")
        except ValueError as exc:
            raise UsageError(f"min_severity: {exc}") from None
        opts = ExplainOptions(since_ns=_since(params), pids=(pid,) if pid is not None else (), min_severity=min_sev)
        return self._reports.get(opts, file_signature(self.db), lambda: explain_db(self.db, opts))

    def warm(self) -> None:
        """Run one query: its first run imports and opens what the requests need (a bad recording is theirs to report)."""
        try:
            self.query({"sql": store.TRIVIAL_QUERY, "limit": 1})
        except GpuscopeError:
            pass

    def read(self, read: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``read(conn, *args, **kwargs)`` on a read-only connection of its own."""
        conn = open_recording(self.db)
        try:
            return read(conn, *args, **kwargs)
        finally:
            conn.close()

    # -- endpoints -------------------------------------------------------------------------------------------------

    def time(self, params: Params) -> dict[str, Any]:
        return {"timestamp_ns": time.time_ns()}

    def overview(self, params: Params) -> dict[str, Any]:
        report = self._explain(params)
        d = report.as_dict()
        sessions = self.read(store.sessions_brief)
        top = d["findings"][0] if d["findings"] else None
        return {
            "version": __version__,
            "recording": str(self.db),
            "sessions": sessions,
            "nodes": sorted({s["node"] for s in sessions if s["node"]}),
            "window": d["window"],
            "events": d["window"]["events"],
            "recording_state": d.get("recording"),
            "finding_counts": _counts(f["severity"] for f in d["findings"]),
            "top_finding": top,
            "notes": d["notes"],
            "sampling": d.get("sampling"),
        }

    def ops(self, params: Params) -> dict[str, Any]:
        d = self._explain(params).as_dict()
        return {"window": d["window"], "ops": d["stats"], "notes": d["notes"], "sampling": d.get("sampling")}

    def findings(self, params: Params) -> dict[str, Any]:
        d = self._explain(params).as_dict()
        return {
            "window": d["window"],
            "findings": d["findings"],
            "reference_findings": d["reference_findings"],
            "notes": d["notes"],
            "caveats": d["caveats"],
        }

    def processes(self, params: Params) -> dict[str, Any]:
        return {"processes": self.read(store.process_rows, _limit(params))}

    def containers(self, params: Params) -> dict[str, Any]:
        return {"containers": self.read(store.container_rows, _limit(params))}

    def stacks(self, params: Params) -> dict[str, Any]:
        conn = open_recording(self.db)
        try:
            found = top_stacks(
                conn,
                op=params.get("op") or None,
                pid=_int(params, "pid", lo=0),
                min_duration_ns=_int(params, "min_duration_ns", lo=0),
                limit=int(_int(params, "limit", default=10, lo=1, hi=100) or 10),
            )
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

    def profile(self, params: Params) -> dict[str, Any]:
        """Where the traced threads' CPU time went: hot functions and stacks, by on-CPU samples (estimates)."""
        pid, since_ns = _int(params, "pid", lo=0), _since(params)
        limit = int(_int(params, "limit", default=10, lo=1, hi=100) or 10)
        found: dict[str, Any] = self._profiles.get(
            (pid, since_ns, limit),
            file_signature(self.db),
            lambda: self.read(profile_summary, pid=pid, since_ns=since_ns, limit=limit),
        )
        return found

    def profile_speedscope(self, params: Params) -> dict[str, Any]:
        """The same samples as a speedscope file: one sampled profile per thread."""
        pid, since_ns = _int(params, "pid", lo=0), _since(params)
        doc: dict[str, Any] = self.read(
            profile_speedscope, pid=pid, since_ns=since_ns, name=f"{self.db.name}: on-CPU samples"
        )
        return doc

    def events(self, params: Params) -> dict[str, Any]:
        """A page of events in id order: ``after`` the last id of the previous page (keyset paging)."""
        bounds: dict[str, int | None] = {}
        for name in ("from", "to"):
            bounds[name] = None
            if params.get(name):
                point = parse_time(params[name], name)
                if point.wall_ns is None:
                    raise UsageError(f"{name}: give an absolute time here (ISO 8601 or @UNIX_SECONDS)")
                bounds[name] = point.wall_ns
        limit = _limit(params)
        rows = self.read(
            store.events_page,
            after=int(_int(params, "after", default=0) or 0),
            limit=limit + 1,
            op=params.get("op") or None,
            pid=_int(params, "pid", lo=0),
            from_wall_ns=bounds["from"],
            to_wall_ns=bounds["to"],
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return {"events": rows, "next_after": rows[-1]["id"] if more and rows else None}

    def timeline(self, params: Params) -> dict[str, Any]:
        """Per time bucket: each op's call count, mean and max latency, and the host's off-CPU and I/O events.

        ``from``/``to`` (absolute times) or ``since`` choose the span, ``buckets`` its resolution.
        """
        buckets = int(_int(params, "buckets", default=120, lo=1, hi=2000) or 120)
        lo, hi = self.read(store.wall_bounds)
        if lo is None:
            return {"start_wall_ns": None, "end_wall_ns": None, "bucket_ns": None, "series": []}
        since = _since(params)
        start, end = (hi - since if since is not None else lo), hi
        for name in ("from", "to"):
            if params.get(name):
                at = parse_time(params[name], name).resolve(lo, hi)
                start, end = (max(lo, at), end) if name == "from" else (start, min(hi, at))
        end = max(end, start + 1)
        width = max(1, -(-(end - start) // buckets))
        rows = self.read(store.timeline_rows, start, end, width)
        series: dict[str, dict[str, Any]] = {}
        for r in rows:
            s = series.setdefault(r["op"], {"op": r["op"], "source": r["source"], "points": []})
            s["points"].append([int(r["b"]), r["n"], round(r["mean_ns"] or 0), r["max_ns"]])
        return {"start_wall_ns": start, "end_wall_ns": end, "bucket_ns": width, "series": list(series.values())}

    def graph_events(self, params: Params) -> dict[str, Any]:
        return {"graph_events": self.read(store.graph_event_rows, _limit(params))}

    def graph_metrics(self, params: Params) -> dict[str, Any]:
        rows = self.read(store.graph_op_rows)
        for r in rows:
            span = (r["last_wall_ns"] or 0) - (r["first_wall_ns"] or 0)
            r["rate_per_s"] = round(r["count"] / (span / 1e9), 3) if span > 0 else None
        return {"ops": rows}

    def snapshots(self, params: Params) -> dict[str, Any]:
        """The host once a second (CPU, memory, load, swap): recorded by trace, or an Ingero import's samples."""
        since = _since(params)
        rows = self.read(store.system_sample_rows, None, _limit(params))
        if rows:
            if since is not None:
                rows = [r for r in rows if r["wall_ns"] >= rows[-1]["wall_ns"] - since]
            return {"snapshots": rows, "source": "recorded"}
        rows = self.read(store.imported_snapshot_rows, _limit(params))
        if rows:
            return {"snapshots": rows, "source": "imported"}
        return {"snapshots": [], "note": "this recording holds no system samples (recorded before gpuscope kept them)"}

    def collectives(self, params: Params) -> dict[str, Any]:
        """Each NCCL rank's collective calls, with its host activity before each (for cross-node stragglers)."""
        from gpuscope.analysis.collectives import DEFAULT_LIMIT, MAX_LIMIT, collective_calls

        pid = _int(params, "pid", lo=0)
        limit = int(_int(params, "limit", default=DEFAULT_LIMIT, lo=1, hi=MAX_LIMIT) or DEFAULT_LIMIT)
        opts = ExplainOptions(since_ns=_since(params), pids=(pid,) if pid is not None else ())
        return collective_calls(self.db, opts, limit)

    def capabilities(self, params: Params) -> dict[str, Any]:
        sources = self.read(store.source_counts)
        items = [{"id": s, "label": s, "available": n > 0, "events": n} for s, n in sorted(sources.items())]
        items.append({"id": "stacks", "label": "call stacks", "available": self.read(store.has_call_stacks)})
        for planned in ("gpu_utilization (NVML)", "sm_efficiency (CUPTI)", "nvlink (DCGM)"):
            items.append({"id": planned.split(" ")[0], "label": planned, "available": False, "planned": True})
        return {"capabilities": items}

    def query(self, body: Mapping[str, Any]) -> dict[str, Any]:
        sql, limit = body.get("sql"), body.get("limit", DEFAULT_ROWS)
        if not isinstance(sql, str) or not sql.strip():
            raise UsageError('body: {"sql": "<one read-only statement>", "limit": N}, with a non-empty sql string')
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_ROWS:
            raise UsageError(f"limit: an integer from 1 to {MAX_ROWS}")
        pids = body.get("pids", [])
        if (
            not isinstance(pids, list)
            or len(pids) > MAX_PIDS
            or not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= INT64_MAX for p in pids)
        ):
            raise UsageError(f"pids: a list of at most {MAX_PIDS} process ids")
        window = {k: body.get(k) for k in ("since", "from", "to")}
        if not all(v is None or isinstance(v, str) for v in window.values()):
            raise UsageError("since, from, to: strings (30s, end-5m, ISO 8601, @UNIX_SECONDS)")
        # The CLI's own filter: the same TEMP views over events, cuda_calls, … as `gpuscope query --since`.
        event_filter = EventFilter.from_options(
            since=window["since"], start=window["from"], end=window["to"], pids=pids
        )
        timeout_s = body.get("timeout_s", QUERY_TIMEOUT_S)
        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 0 < timeout_s < float("inf"):
            raise UsageError("timeout_s: a positive number of seconds")
        # A client may ask for less time than the server's limit, never more.
        with open_reader(
            self.db, event_filter=event_filter, timeout_s=min(float(timeout_s), QUERY_TIMEOUT_S), limits=QUERY_LIMITS
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


class ReportCache:
    """Explain reports by options, while the recording is unchanged; one computation at a time per options.

    Explain over a large recording takes seconds; the dashboard's page asks
    for the same window's overview, ops and findings together, every few
    seconds. A report is reused while the file and its WAL keep their size and
    modification time, so a recording in progress is re-read as it grows.
    """

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._entries: dict[Any, tuple[Any, Any]] = {}
        self._locks: dict[Any, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: Any, signature: Any, compute: Callable[[], Any]) -> Any:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == signature:
                return hit[1]
            value = compute()
            with self._guard:
                self._entries.pop(key, None)
                self._entries[key] = (signature, value)
                while len(self._entries) > self.size:
                    oldest = next(iter(self._entries))
                    self._entries.pop(oldest)
                    self._locks.pop(oldest, None)
            return value


def _counts(severities: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in severities:
        out[s] = out.get(s, 0) + 1
    return out


SINCE = "only the last DURATION of the recording (e.g. 30s, 5m, 1m30s)"
PID = "only this process"
LIMIT = f"at most this many rows (1..{MAX_ROWS}, default {DEFAULT_ROWS})"
ENDPOINTS = [
    Endpoint("/time", "the server's wall clock (no recording access), for clock-skew measurement", {}, Api.time),
    Endpoint("/overview", "the recording at a glance", {"since": SINCE, "pid": PID}, Api.overview),
    Endpoint("/ops", "per-op count, rate, p50/p95/p99/max and time share", {"since": SINCE, "pid": PID}, Api.ops),
    Endpoint(
        "/findings",
        "explain's ranked findings with evidence and fix",
        {"since": SINCE, "pid": PID, "min_severity": "low, medium, high or critical"},
        Api.findings,
    ),
    Endpoint("/processes", "traced processes, busiest first", {"limit": LIMIT}, Api.processes),
    Endpoint("/containers", "cgroups mapped to containers, pods and jobs", {"limit": LIMIT}, Api.containers),
    Endpoint(
        "/stacks",
        "the call stacks behind an op",
        {
            "op": "only calls of this op",
            "pid": PID,
            "min_duration_ns": "only calls at least this long (ns)",
            "limit": "at most this many stacks (1..100)",
        },
        Api.stacks,
    ),
    Endpoint(
        "/profile",
        "where the traced threads' CPU time went: hot functions and stacks by on-CPU samples (estimates)",
        {"since": SINCE, "pid": PID, "limit": "at most this many functions and stacks (1..100, default 10)"},
        Api.profile,
    ),
    Endpoint(
        "/profile.speedscope",
        "the on-CPU samples as a speedscope file to download, one sampled profile per thread",
        {"since": SINCE, "pid": PID},
        Api.profile_speedscope,
        download=".speedscope.json",
    ),
    Endpoint(
        "/events",
        "events in id order, a page at a time",
        {
            "after": "the next_after of the previous page",
            "op": "only this op",
            "pid": PID,
            "from": "from this time (ISO 8601 or @UNIX_SECONDS)",
            "to": "up to this time",
            "limit": LIMIT,
        },
        Api.events,
    ),
    Endpoint(
        "/timeline",
        "per time bucket: each op's count, mean and max latency",
        {"since": SINCE, "from": "from this time", "to": "up to this time", "buckets": "how many buckets (1..2000)"},
        Api.timeline,
    ),
    Endpoint("/graph-events", "CUDA Graph calls, newest first", {"limit": LIMIT}, Api.graph_events),
    Endpoint("/graph-metrics", "CUDA Graph capture, instantiate and launch counts and rates", {}, Api.graph_metrics),
    Endpoint(
        "/snapshots",
        "the host once a second: CPU, memory, load, swap",
        {"since": SINCE, "limit": LIMIT},
        Api.snapshots,
    ),
    Endpoint(
        "/collectives",
        "each NCCL rank's collective calls (wall clock) with its preempted, blocked and block-I/O time before each",
        {"since": SINCE, "pid": PID, "limit": "at most this many calls per rank and op, the latest (default 20000)"},
        Api.collectives,
    ),
    Endpoint("/capabilities", "what this recording holds, by source", {}, Api.capabilities),
]


def handle_errors(exc: BaseException) -> tuple[int, str, str] | None:
    """The status, code and message for an error the API reports to its client; None for a bug."""
    from gpuscope.errors import DatabaseError, GpuscopeError, SchemaTooNewError
    from gpuscope.query.guard import QueryRefusedError, QuerySyntaxError, QueryTimeoutError, QueryTooLargeError

    if isinstance(exc, QueryRefusedError):
        return 400, "refused", str(exc)
    if isinstance(exc, QueryTooLargeError):
        return 400, "result_too_large", f"{exc}; {exc.remedy}"
    if isinstance(exc, QuerySyntaxError):
        return 400, "bad_sql", str(exc)
    if isinstance(exc, QueryTimeoutError):
        return 503, "timeout", str(exc)
    if isinstance(exc, UsageError):
        return 400, "bad_request", str(exc)
    if isinstance(exc, (DatabaseError, SchemaTooNewError, sqlite3.DatabaseError)):
        return 503, "recording_unavailable", str(exc)
    if isinstance(exc, GpuscopeError):
        return 500, "failed", str(exc)
    if isinstance(exc, MemoryError):
        # SQLite at the process's heap cap (cap_sqlite_heap), taken by reads running beside this one.
        return 503, "busy", "the server is short of memory for this read: try again shortly"
    return None
