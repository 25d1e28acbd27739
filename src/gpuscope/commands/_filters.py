"""Event filter options shared by query, export and diff: ``--since/--from/--to/--pid/--node``."""

from __future__ import annotations

import argparse

from gpuscope.errors import UsageError
from gpuscope.model.units import parse_duration_s
from gpuscope.query.filters import EventFilter


def add_filter_options(p: argparse.ArgumentParser, *, node: bool = True) -> None:
    p.add_argument("--since", metavar="DURATION", help="only the last DURATION of the recording (e.g. 30s, 5m)")
    p.add_argument(
        "--from", dest="start", metavar="TIME", help="from this time: offset from the start (90s) or ISO 8601"
    )
    p.add_argument("--to", dest="end", metavar="TIME", help="up to this time: offset from the start or ISO 8601")
    p.add_argument("--pid", type=int, action="append", default=[], help="only this process (repeatable)")
    if node:
        p.add_argument("--node", action="append", default=[], help="only this node (repeatable)")


def filter_from_args(args: argparse.Namespace) -> EventFilter:
    return EventFilter.from_options(
        since=args.since, start=args.start, end=args.end, pids=args.pid, nodes=getattr(args, "node", None) or []
    )


def timeout_from_args(text: str) -> float:
    try:
        return parse_duration_s(text)
    except ValueError:
        raise UsageError(f"cannot read --timeout {text!r}", remedy="use e.g. 5s, 500ms, 0 for no limit") from None
