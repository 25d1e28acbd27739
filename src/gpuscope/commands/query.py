"""gpuscope query: run one read-only SQL statement against a recording."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from gpuscope.analysis.recording_state import recording_note
from gpuscope.commands._options import (
    add_db_option,
    add_filter_options,
    db_from_args,
    filter_from_args,
    timeout_from_args,
)
from gpuscope.query import add_output_options, chosen_format, open_reader, write_rows

NAME = "query"
HELP = "run read-only SQL on a recording (views: events, cuda_calls, sched_switches; see docs/query.md)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sql", help='one SELECT statement, e.g. "SELECT op, count(*) FROM events GROUP BY op"')
    add_db_option(p)
    p.add_argument("--timeout", default="5s", help="stop the query after this long (default 5s; 0 = no limit)")
    add_filter_options(p)
    add_output_options(p)


def run(args: argparse.Namespace) -> int:
    db = db_from_args(args)
    with open_reader(db, event_filter=filter_from_args(args), timeout_s=timeout_from_args(args.timeout)) as reader:
        result = reader.query(args.sql)
        # Not in the result: CSV and JSON stay machine-readable; a person still sees the recording is partial.
        note = _note(reader.conn, db)
        if note:
            print(note, file=sys.stderr)
        try:
            write_rows(result.columns, result.rows, chosen_format(args.output, sys.stdout), sys.stdout)
        finally:
            result.close()  # stopped early (a closed pipe): end the stream while its connection is open
    return 0


def _note(conn: sqlite3.Connection, db: Path) -> str | None:
    """The recording's state when a session is not closed or stopped early (``explain``'s wording)."""
    try:
        return recording_note(conn, db)
    except sqlite3.DatabaseError:
        return None  # a file too damaged to say: the query itself reported what it could read
