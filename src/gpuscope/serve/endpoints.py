"""/api/v1's GET endpoints as a table over ``Api``, and the HTTP status of each error the API reports.

``ENDPOINTS``: each endpoint names its ``Api`` method, its parameters
(``gpuscope.serve.params``: read from the query string once, by
``gpuscope.serve.app``) and the schema of its answer
(``gpuscope.serve.schemas``); the OpenAPI document is built from it.
``handle_errors`` maps what a read raises to the status, code and message its
client gets.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuscope.analysis.collectives import DEFAULT_LIMIT as COLLECTIVES_DEFAULT
from gpuscope.analysis.collectives import MAX_LIMIT as COLLECTIVES_MAX
from gpuscope.errors import GpuscopeError, UsageError
from gpuscope.model.findings import Severity
from gpuscope.serve import schemas
from gpuscope.serve.http_api import PROFILE_DEFAULT, Api
from gpuscope.serve.params import (
    AFTER,
    LIMIT,
    OP,
    PID,
    SESSION,
    SINCE,
    STACK_LIMIT,
    WALL_FROM,
    WALL_TO,
    Kind,
    Param,
)
from gpuscope.serve.schemas import Schema


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One GET endpoint: its path under /api/v1, what it returns, its query parameters, its method and answer's schema.

    ``handler(api, **parse_query(params, query))`` answers a request.
    ``download``: the answer is a file to save, named after the recording with this suffix.
    """

    path: str
    summary: str
    params: tuple[Param, ...]
    handler: Callable[..., dict[str, Any]]
    response: Schema
    download: str | None = None


PROFILE_LIMIT = Param(
    "limit",
    f"at most this many functions and stacks (1..100, default {PROFILE_DEFAULT})",
    Kind.INT,
    lo=1,
    hi=100,
    default=PROFILE_DEFAULT,
)
FROM = Param("from", "from this time", Kind.TIME, arg="start")
TO = Param("to", "up to this time", Kind.TIME, arg="end")
ENDPOINTS = [
    Endpoint(
        "/time", "the server's wall clock (no recording access), for clock-skew measurement", (), Api.time, schemas.TIME
    ),
    Endpoint("/overview", "the recording at a glance", (SESSION, SINCE, PID), Api.overview, schemas.OVERVIEW),
    Endpoint("/ops", "per-op count, rate, p50/p95/p99/max and time share", (SESSION, SINCE, PID), Api.ops, schemas.OPS),
    Endpoint(
        "/findings",
        "explain's ranked findings with evidence and fix",
        (
            SESSION,
            SINCE,
            PID,
            Param("min_severity", "low, medium, high or critical", Kind.SEVERITY, default=Severity.LOW),
        ),
        Api.findings,
        schemas.FINDINGS,
    ),
    Endpoint("/processes", "traced processes, busiest first", (LIMIT,), Api.processes, schemas.PROCESSES),
    Endpoint(
        "/containers", "cgroups mapped to containers, pods and jobs", (LIMIT,), Api.containers, schemas.CONTAINERS
    ),
    Endpoint(
        "/stacks",
        "the call stacks behind an op",
        (OP, PID, Param("min_duration_ns", "only calls at least this long (ns)", Kind.INT), STACK_LIMIT),
        Api.stacks,
        schemas.STACKS,
    ),
    Endpoint(
        "/profile",
        "where the traced threads' CPU time went: hot functions and stacks by on-CPU samples (estimates)",
        (SESSION, SINCE, PID, PROFILE_LIMIT),
        Api.profile,
        schemas.PROFILE,
    ),
    Endpoint(
        "/profile.speedscope",
        "the on-CPU samples as a speedscope file to download, one sampled profile per thread",
        (SESSION, SINCE, PID),
        Api.profile_speedscope,
        schemas.SPEEDSCOPE,
        download=".speedscope.json",
    ),
    Endpoint(
        "/events",
        "events in id order, a page at a time",
        (AFTER, Param("op", "only this op", Kind.STR), PID, WALL_FROM, WALL_TO, LIMIT),
        Api.events,
        schemas.EVENTS,
    ),
    Endpoint(
        "/timeline",
        "per time bucket: each op's count, mean and max latency",
        (SESSION, SINCE, FROM, TO, Param("buckets", "how many buckets (1..2000)", Kind.INT, 1, 2000, 120)),
        Api.timeline,
        schemas.TIMELINE,
    ),
    Endpoint(
        "/calls",
        "the slowest GPU calls of a span, slowest first, each with its stack",
        (SESSION, SINCE, FROM, TO, Param("limit", "at most this many calls (1..100)", Kind.INT, 1, 100, 10)),
        Api.calls,
        schemas.CALLS,
    ),
    Endpoint(
        "/lanes",
        "per thread that made GPU calls: its share of each interval in GPU calls, preempted and blocked",
        (SESSION, SINCE, FROM, TO, Param("width", "how many intervals (1..2000)", Kind.INT, 1, 2000, 600)),
        Api.lanes,
        schemas.LANES,
    ),
    Endpoint("/graph-events", "CUDA Graph calls, newest first", (LIMIT,), Api.graph_events, schemas.GRAPH_EVENTS),
    Endpoint(
        "/graph-metrics",
        "CUDA Graph capture, instantiate and launch counts and rates",
        (),
        Api.graph_metrics,
        schemas.GRAPH_METRICS,
    ),
    Endpoint(
        "/snapshots",
        "the host once a second: CPU, memory, load, swap",
        (SINCE, LIMIT),
        Api.snapshots,
        schemas.SNAPSHOTS,
    ),
    Endpoint(
        "/collectives",
        "each NCCL rank's collective calls (wall clock) with its preempted, blocked and block-I/O time before each",
        (
            SESSION,
            SINCE,
            PID,
            Param(
                "limit",
                f"at most this many calls per rank and op, the latest (default {COLLECTIVES_DEFAULT})",
                Kind.INT,
                1,
                COLLECTIVES_MAX,
                COLLECTIVES_DEFAULT,
            ),
        ),
        Api.collectives,
        schemas.COLLECTIVES,
    ),
    Endpoint(
        "/diff",
        "this recording against the baseline the dashboard serves it with (--baseline): per-op counts, rates, "
        "p50/p95/p99 and their change, the findings only one has",
        (),
        Api.diff,
        schemas.DIFF,
    ),
    Endpoint("/capabilities", "what this recording holds, by source", (), Api.capabilities, schemas.CAPABILITIES),
]


def handle_errors(exc: BaseException) -> tuple[int, str, str] | None:
    """The status, code and message for an error the API reports to its client; None for a bug."""
    from gpuscope.errors import DatabaseError, SchemaTooNewError
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
