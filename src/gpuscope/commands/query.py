"""gpuscope query: run one read-only SQL statement against a recording."""

from __future__ import annotations

import argparse
import sys

from gpuscope.commands._options import (
    add_db_option,
    add_filter_options,
    db_from_args,
    filter_from_args,
    timeout_from_args,
)
from gpuscope.query import add_output_options, chosen_format, run_query, write_rows

NAME = "query"
HELP = "run read-only SQL on a recording (views: events, cuda_calls, sched_switches; see docs/query.md)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sql", help='one SELECT statement, e.g. "SELECT op, count(*) FROM events GROUP BY op"')
    add_db_option(p)
    p.add_argument("--timeout", default="5s", help="stop the query after this long (default 5s; 0 = no limit)")
    add_filter_options(p)
    add_output_options(p)


def run(args: argparse.Namespace) -> int:
    reader, result = run_query(
        db_from_args(args), args.sql, event_filter=filter_from_args(args), timeout_s=timeout_from_args(args.timeout)
    )
    with reader:
        try:
            write_rows(result.columns, result.rows, chosen_format(args.output, sys.stdout), sys.stdout)
        finally:
            result.close()  # stopped early (a closed pipe): end the stream while its connection is open
    return 0
