"""gpuscope query: run one read-only SQL statement against a recording."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from gpuscope.commands._fleet import add_fleet_options, fleet_client, wants_fleet, warn
from gpuscope.commands._options import (
    add_db_option,
    add_filter_options,
    bounded_int,
    db_from_args,
    filter_from_args,
    timeout_from_args,
)
from gpuscope.errors import UsageError
from gpuscope.query import OutputFormat, add_output_options, chosen_format, open_reader, write_rows
from gpuscope.query.guard import cap_sqlite_heap
from gpuscope.query.guarded import refuse_empty_sql
from gpuscope.query.humanize import ReadableCells, readable_cells

NAME = "query"
HELP = "run read-only SQL on a recording (views: events, cuda_calls, sched_switches; `gpuscope docs query`)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sql", help='one SELECT statement, e.g. "SELECT op, count(*) FROM events GROUP BY op"')
    add_db_option(p)
    p.add_argument(
        "--timeout",
        default="5s",
        help="stop the query after this long (default 5s; 0 = no limit, locally; with --nodes, each node's limit)",
    )
    add_filter_options(p, fleet=True)
    add_output_options(p)
    add_fleet_options(p, timeout=False)
    p.add_argument(
        "--limit",
        type=bounded_int(1, 10_000, "a row count"),
        default=1000,
        metavar="N",
        help="with --nodes: at most N rows per node",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="table cells as stored: integer ns, no digit grouping (JSON and CSV are always as stored)",
    )


def run(args: argparse.Namespace) -> int:
    refuse_empty_sql(args.sql)  # before any recording or node is asked
    if wants_fleet(args):
        return _fleet(args)
    db = db_from_args(args)
    # This process exists to run the user's SQL: no statement may take SQLite past the cap (docs/query.md).
    cap_sqlite_heap()
    with open_reader(db, event_filter=filter_from_args(args), timeout_s=timeout_from_args(args.timeout)) as reader:
        result = reader.query(args.sql)
        # Not in the result: CSV and JSON stay machine-readable; a person still sees the recording is partial.
        for note in (reader.sessions_note(), _note(reader.conn, db)):
            if note:
                print(note, file=sys.stderr)
        fmt = chosen_format(args.output)
        # Every table is made readable, in a pipe too: the table is for people, and a person reads
        # `gpuscope query ... | less` as much as a terminal; programs ask for --json or --csv, and
        # --raw gives the stored numbers in a table. Output that changed with isatty() is what
        # surprised people in the first place.
        cells = None if fmt is not OutputFormat.TABLE or args.raw else readable_cells(reader.conn, result.columns)
        try:
            write_rows(result.columns, result.rows, fmt, sys.stdout, table_cells=cells)
        finally:
            result.close()  # stopped early (a closed pipe): end the stream while its connection is open
        unreadable = cells.note() if cells is not None else None
        if unreadable:
            print(unreadable, file=sys.stderr)
    return 0


def _fleet(args: argparse.Namespace) -> int:
    """The same SQL on every node (its own read-only guard and time limit there); rows tagged with their node."""
    from gpuscope.fleet.gather import gather_rows

    if not 1 <= args.limit <= 10_000:
        raise UsageError(f"--limit {args.limit}: from 1 to 10000 rows per node")
    client = fleet_client(args)
    # The node stops the SQL a little before our deadline, so a long query comes back as its own error.
    body = {
        "sql": args.sql,
        "limit": args.limit,
        "since": args.since,
        "from": args.start,
        "to": args.end,
        "timeout_s": round(max(0.1, client.timeout_s * 0.8), 3),
    }
    if args.pid:
        body["pids"] = args.pid
    got = gather_rows(client.post("/api/v1/query", {k: v for k, v in body.items() if v is not None}))
    warn(got.warnings)
    fmt = chosen_format(args.output)
    # Readable as a local query's table: durations, wall times, grouped digits. Monotonic times stay
    # numbers (each node's clock offsets are in its own recording), and the note says so.
    cells = None if fmt is not OutputFormat.TABLE or args.raw else ReadableCells(got.columns, {})
    write_rows(got.columns, iter(got.rows), fmt, sys.stdout, table_cells=cells)
    if cells is not None and cells.unconverted:
        names = ", ".join(sorted(cells.unconverted))
        print(f"note: {names} shown as recorded (each node's CLOCK_MONOTONIC ns): select wall_ns for times "
              "that compare across nodes", file=sys.stderr)  # fmt: skip
    warn([f"node {n}: more than {args.limit} rows; only the first {args.limit} shown (--limit)" for n in got.truncated])
    return 0


def _note(conn: sqlite3.Connection, db: Path) -> str | None:
    """The recording's state when a session is not closed or stopped early (``explain``'s wording)."""
    # Imported here: it brings numpy, which `query --nodes` (start-up bound with many nodes) never needs.
    from gpuscope.analysis.coverage import sampling_note
    from gpuscope.analysis.recording_state import recording_note

    try:
        notes = [recording_note(conn, db), sampling_note(conn)]
    except sqlite3.DatabaseError:
        return None
    return (
        "\n".join(n for n in notes if n) or None
    )  # a file too damaged to say: the query itself reported what it could read
