"""Read-only, time-limited SQL over a recording: filters as views, shared output formats."""

from gpuscope.model.times import TimePoint
from gpuscope.query.filters import EventFilter
from gpuscope.query.guard import QueryRefusedError, QuerySyntaxError, QueryTimeoutError, QueryTooLargeError
from gpuscope.query.guarded import (
    DEFAULT_TIMEOUT_S,
    GuardedReader,
    QueryResult,
    ResultLimits,
    open_reader,
    run_query,
)
from gpuscope.query.output import OutputFormat, add_output_options, chosen_format, write_rows

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "EventFilter",
    "GuardedReader",
    "OutputFormat",
    "QueryRefusedError",
    "QueryResult",
    "QuerySyntaxError",
    "QueryTimeoutError",
    "QueryTooLargeError",
    "ResultLimits",
    "TimePoint",
    "add_output_options",
    "chosen_format",
    "open_reader",
    "run_query",
    "write_rows",
]
