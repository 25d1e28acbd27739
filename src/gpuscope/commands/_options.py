"""Options shared by subcommands: the recording (``--db``) and the event filters (``--since/--from/--to/--pid/--node``).

Each is defined once here, so every command spells, documents and resolves
it the same way.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscope.config import DEFAULT_DB, resolve_db_path
from gpuscope.errors import UsageError
from gpuscope.model.units import parse_duration_s, parse_size

if TYPE_CHECKING:
    # Imported where used: the query package loads the query engine and the
    # recording formats, which `trace` never needs (about 50 ms at its start).
    from gpuscope.query.filters import EventFilter


def add_db_option(p: argparse.ArgumentParser, *, purpose: str = "the recording to read") -> None:
    """Add ``--db PATH``; its help names the default and where it came from (resolved by ``db_from_args``)."""
    try:
        chosen = resolve_db_path()
        default = f"{chosen.path}, from {chosen.source}"
    except UsageError:
        # A broken config file is reported when the command runs, not while its help is built.
        default = f"$GPUSCOPE_DB, else `db` in the config file, else {DEFAULT_DB}"
    p.add_argument("--db", metavar="PATH", help=f"{purpose} (default: {default})".replace("%", "%%"))


def db_from_args(args: argparse.Namespace) -> Path:
    """Resolve the recording a command uses: ``--db`` > ``$GPUSCOPE_DB`` > config ``db`` > the built-in default."""
    return resolve_db_path(args.db).path


def add_filter_options(p: argparse.ArgumentParser, *, node: bool = True) -> None:
    """Add the time window (``--since``, ``--from``, ``--to``), ``--pid`` and, with ``node``, ``--node``."""
    p.add_argument(
        "--since",
        metavar="DURATION",
        help="only the last DURATION of the recording, counted back from its end, not from now (e.g. 30s, 5m)",
    )
    p.add_argument(
        "--from",
        dest="start",
        metavar="TIME",
        help="from TIME: an offset from the recording start (90s) or an ISO 8601 time (2026-01-02T03:04:05Z)",
    )
    p.add_argument(
        "--to", dest="end", metavar="TIME", help="up to TIME: an offset from the recording start or ISO 8601"
    )
    p.add_argument("--pid", type=int, action="append", default=[], help="only this process (repeatable)")
    if node:
        p.add_argument("--node", action="append", default=[], help="only this node (repeatable)")


def filter_from_args(args: argparse.Namespace) -> EventFilter:
    """Parse the filter options; raises UsageError for text that is neither a duration nor ISO 8601."""
    from gpuscope.query.filters import EventFilter

    return EventFilter.from_options(
        since=args.since, start=args.start, end=args.end, pids=args.pid, nodes=getattr(args, "node", None) or []
    )


def timeout_from_args(text: str) -> float:
    """Read ``--timeout`` in seconds; raises UsageError for text that is not a duration."""
    return duration_s("--timeout", text, examples="5s, 500ms, 0 for no limit")


def duration_s(flag: str, text: str, *, examples: str = "30s, 5m, 2h or 250ms") -> float:
    """Read a duration option (``30s``, ``5m``, ``250ms``) in seconds; raises UsageError naming ``flag``.

    Negative, infinite and unreadable values are refused; ``examples`` goes in the remedy.
    """
    try:
        value = parse_duration_s(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag} {text}: not a duration", remedy=f"use e.g. {examples}")
    return value


def size_bytes(flag: str, text: str) -> int:
    """Read a size option (``500m``, ``10g``, ``64k``, ``0``) in bytes; raises UsageError naming ``flag``."""
    try:
        value = parse_size(text)
    except (ValueError, OverflowError):
        value = -1
    if value < 0:
        raise UsageError(f"{flag} {text}: not a size", remedy="use e.g. 64k, 500m, 10g")
    return value
