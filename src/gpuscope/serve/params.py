"""What a request to /api/v1 may carry, as one typed spec: parsed once, checked, and published in OpenAPI.

An endpoint lists its ``Param``s (name, meaning, kind, bounds, default).
``parse_query`` reads a request's query string with them into the keyword
arguments of the endpoint's typed ``Api`` method; ``query_request`` reads the
body of ``POST /query``. MCP checks its typed arguments against the same
``Param``s (``Param.check``), so a bound is one rule and its error reads the
same wherever it is met; ``gpuscope.serve.openapi`` publishes them
(``Param.schema``). Every refusal is a one-line ``UsageError`` naming the
parameter: the API answers it as a 400, MCP as a tool error.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscope.errors import UsageError
from gpuscope.model.findings import Severity
from gpuscope.model.limits import PID_MAX, PID_MIN
from gpuscope.model.session_choice import LAST_RUN, SESSION_FORMS, SessionChoice
from gpuscope.model.times import TimePoint
from gpuscope.model.units import DURATION_FORMS, parse_duration_ns
from gpuscope.query.filters import EventFilter, parse_time

INT64_MAX = 2**63 - 1  # SQLite's largest integer: an id or a duration past it cannot be compared
MAX_ROWS = 10_000  # rows in one answer (query, events): the page stays small, the server responsive
DEFAULT_ROWS = 1_000
QUERY_TIMEOUT_S = 5.0
MAX_PIDS = 1000  # in one query's filter (each is a bound parameter of its views)


class Kind(enum.Enum):
    """How a parameter's text is read, and what the method behind the endpoint receives."""

    INT = "int"  # an integer from lo to hi
    STR = "str"  # the text as it is
    DURATION = "duration"  # 30s, 5m, 1m30s: integer nanoseconds
    TIME = "time"  # any of TIME_FORMS: a TimePoint, resolved against the recording by the method
    WALL_TIME = "wall time"  # an absolute time (ISO 8601, @UNIX_SECONDS): integer Unix nanoseconds
    SEVERITY = "severity"  # low, medium, high or critical: a Severity
    SESSION = "session"  # N, last or all: a SessionChoice


Value = int | str | TimePoint | Severity | SessionChoice | None

# Examples the OpenAPI document shows for the kinds read from text forms (the parsers are the CLI's).
_EXAMPLES: dict[Kind, list[str]] = {
    Kind.DURATION: ["30s", "5m", "1m30s", "250ms"],
    Kind.TIME: ["90s", "end-30s", "2026-01-02T03:04:05Z", "@1767323045"],
    Kind.WALL_TIME: ["2026-01-02T03:04:05Z", "@1767323045"],
    Kind.SESSION: ["last", "all", "3"],
}


@dataclass(frozen=True, slots=True)
class Param:
    """One query parameter: its name on the wire, what it means, how it is read, its bounds and default.

    ``lo``/``hi``: the inclusive range of an ``INT``; ``default``: what the
    method receives when the parameter is absent or empty; ``arg``: the
    method's keyword, where it differs from ``name`` (``since`` is
    ``since_ns``: the method receives nanoseconds, not text).
    """

    name: str
    meaning: str
    kind: Kind
    lo: int = 0
    hi: int = INT64_MAX
    default: Value = None
    arg: str = ""

    @property
    def keyword(self) -> str:
        return self.arg or self.name

    def parse(self, text: str | None) -> Value:
        """The value of ``text`` (absent or empty: the default); raises UsageError naming the parameter."""
        if not text:
            return self.default
        if self.kind is Kind.INT:
            try:
                value = int(text)
            except ValueError:
                raise UsageError(f"{self.name}={text}: not an integer") from None
            return self.check(value)
        if self.kind is Kind.DURATION:
            try:
                return parse_duration_ns(text)
            except ValueError:
                raise UsageError(f"{self.name}={text}: not a duration ({DURATION_FORMS})") from None
        if self.kind is Kind.TIME:
            return parse_time(text, self.name)
        if self.kind is Kind.WALL_TIME:
            wall_ns = parse_time(text, self.name).wall_ns
            if wall_ns is None:
                raise UsageError(f"{self.name}: give an absolute time here (ISO 8601 or @UNIX_SECONDS)")
            return wall_ns
        if self.kind is Kind.SEVERITY:
            try:
                return Severity.parse(text)
            except ValueError as exc:
                raise UsageError(f"{self.name}: {exc}") from None
        if self.kind is Kind.SESSION:
            try:
                return SessionChoice.parse(text)
            except ValueError as exc:
                raise UsageError(f"{self.name}: {exc}") from None
        return text

    def check(self, value: int) -> int:
        """``value`` when it lies within the bounds; raises UsageError saying them (MCP's typed arguments)."""
        if not self.lo <= value <= self.hi:
            raise UsageError(f"{self.name}={value}: must be between {self.lo} and {self.hi}")
        return value

    def schema(self) -> dict[str, Any]:
        """The JSON schema of the parameter's text, as OpenAPI 3.1 publishes it."""
        schema: dict[str, Any]
        if self.kind is Kind.INT:
            schema = {"type": "integer", "minimum": self.lo, "maximum": self.hi}
        elif self.kind is Kind.SEVERITY:
            schema = {"type": "string", "enum": [s.name.lower() for s in Severity]}
        elif self.kind is Kind.SESSION:
            schema = {"type": "string", "pattern": "^([1-9][0-9]*|last|all)$"}
        else:
            schema = {"type": "string"}
        if self.kind in _EXAMPLES:
            schema["examples"] = _EXAMPLES[self.kind]
        if isinstance(self.default, Severity):
            schema["default"] = self.default.name.lower()
        elif isinstance(self.default, SessionChoice):
            schema["default"] = str(self.default)
        elif isinstance(self.default, (int, str)):
            schema["default"] = self.default
        return schema


def parse_query(params: Sequence[Param], query: Mapping[str, str]) -> dict[str, Value]:
    """The keyword arguments of an endpoint's method, read from its query string once.

    Parameters the endpoint does not take are ignored (as any web API
    ignores them); raises UsageError for the first bad value.
    """
    return {p.keyword: p.parse(query.get(p.name)) for p in params}


# -- the parameters that several endpoints (and MCP's tools) share ---------------------------------------------------

SESSION = Param("session", f"which sessions: {SESSION_FORMS}", Kind.SESSION, default=LAST_RUN, arg="sessions")
SINCE = Param(
    "since", "only the last DURATION of the sessions read (e.g. 30s, 5m, 1m30s)", Kind.DURATION, arg="since_ns"
)
PID = Param("pid", "only this process", Kind.INT, lo=PID_MIN, hi=PID_MAX)
LIMIT = Param(
    "limit", f"at most this many rows (1..{MAX_ROWS}, default {DEFAULT_ROWS})", Kind.INT, 1, MAX_ROWS, DEFAULT_ROWS
)
OP = Param("op", "only calls of this op", Kind.STR)
STACK_LIMIT = Param("limit", "at most this many stacks (1..100)", Kind.INT, 1, 100, 10)
AFTER = Param("after", "the next_after of the previous page", Kind.INT, default=0)
WALL_FROM = Param("from", "from this time (ISO 8601 or @UNIX_SECONDS)", Kind.WALL_TIME, arg="from_wall_ns")
WALL_TO = Param("to", "up to this time", Kind.WALL_TIME, arg="to_wall_ns")


def session_choice(text: str | None) -> SessionChoice:
    """``session`` read as ``SESSION`` reads it, typed; raises UsageError naming the parameter."""
    value = SESSION.parse(text)
    return value if isinstance(value, SessionChoice) else LAST_RUN


# -- POST /query -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryRequest:
    """One read-only statement, how many rows of its answer, which events its views show, and its time limit."""

    sql: str
    limit: int = DEFAULT_ROWS
    event_filter: EventFilter = field(default_factory=EventFilter)
    timeout_s: float = QUERY_TIMEOUT_S


def statement(sql: object) -> str:
    """``sql`` when it is a statement's text, not empty; raises UsageError (which the reader would not)."""
    if not isinstance(sql, str) or not sql.strip():
        raise UsageError('body: {"sql": "<one read-only statement>", "limit": N}, with a non-empty sql string')
    return sql


def query_request(body: Mapping[str, Any]) -> QueryRequest:
    """Read the JSON body of ``POST /query``; raises UsageError naming the first bad field.

    ``timeout_s``: a client may ask for less time than the server's limit,
    never more.
    """
    sql, limit = statement(body.get("sql")), body.get("limit", DEFAULT_ROWS)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_ROWS:
        raise UsageError(f"limit: an integer from 1 to {MAX_ROWS}")
    pids = body.get("pids", [])
    if (
        not isinstance(pids, list)
        or len(pids) > MAX_PIDS
        or not all(isinstance(p, int) and not isinstance(p, bool) and PID_MIN <= p <= PID_MAX for p in pids)
    ):
        raise UsageError(f"pids: a list of at most {MAX_PIDS} process ids (each from {PID_MIN} to {PID_MAX})")
    window = {k: body.get(k) for k in ("since", "from", "to", "session")}
    if not all(v is None or isinstance(v, str) for v in window.values()):
        raise UsageError("since, from, to, session: strings (30s, end-5m, ISO 8601, @UNIX_SECONDS; N, last, all)")
    sessions = session_choice(window["session"])
    # The CLI's own filter: the same TEMP views over events, cuda_calls, … as `gpuscope query --since`.
    event_filter = EventFilter.from_options(
        since=window["since"], start=window["from"], end=window["to"], pids=pids, sessions=sessions
    )
    timeout_s = body.get("timeout_s", QUERY_TIMEOUT_S)
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 0 < timeout_s < float("inf"):
        raise UsageError("timeout_s: a positive number of seconds")
    return QueryRequest(sql, limit, event_filter, min(float(timeout_s), QUERY_TIMEOUT_S))
