"""Options shared by subcommands: the recording (``--db``) and the event filters (``--since/--from/--to/--pid/--node``).

Each is defined once here, so every command spells, documents and resolves
it the same way.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscope.config import DEFAULT_DB, expand_home, resolve_db_path
from gpuscope.errors import UsageError
from gpuscope.model.limits import PID_MAX, PID_MIN
from gpuscope.model.session_choice import LAST_RUN, SESSION_FORMS, SessionChoice
from gpuscope.model.times import TIME_FORMS
from gpuscope.model.units import DURATION_FORMS, parse_duration_ns, parse_duration_s, parse_size

if TYPE_CHECKING:
    # Imported where used: the query package loads the query engine and the
    # recording formats, which `trace` never needs (about 50 ms at its start).
    from gpuscope.query.filters import EventFilter
    from gpuscope.query.guarded import GuardedReader


INT64_MAX = 2**63 - 1


def bounded_int(lo: int, hi: int, what: str = "an integer") -> Callable[[str], int]:
    """An argparse ``type`` for integers from ``lo`` to ``hi``: the range is in the message of any other value.

    Every integer option goes through one of these, so a value SQLite or the
    kernel cannot hold is refused here with exit 2, not deep inside.
    """

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not {what} (an integer from {lo:,} to {hi:,})") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text}: out of range ({what} from {lo:,} to {hi:,})")
        return value

    parse.__name__ = what  # argparse names the type in its own messages
    return parse


pid_arg = bounded_int(PID_MIN, PID_MAX, "a process id")


def session_arg(text: str) -> SessionChoice:
    """An argparse ``type`` for ``--session``: N, last or all."""
    try:
        return SessionChoice.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


session_arg.__name__ = "a session"


def add_session_option(p: argparse.ArgumentParser) -> None:
    """Add ``--session N|last|all`` (default: the last run, see ``gpuscope.model.session_choice``)."""
    p.add_argument(
        "--session",
        type=session_arg,
        default=LAST_RUN,
        metavar="N|last|all",
        help=f"which sessions of the recording to read: {SESSION_FORMS}; "
        "the last run is the last trace, with the other nodes traced beside it in a merged recording",
    )


def bounded_float(
    lo: float, hi: float, what: str, *, open_lo: bool = False, open_hi: bool = False
) -> Callable[[str], float]:
    """An argparse ``type`` for finite numbers in a range (``open_*``: the bound itself excluded); nan/inf refused."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a number ({what})") from None
        inside = (lo < value if open_lo else lo <= value) and (value < hi if open_hi else value <= hi)
        if not math.isfinite(value) or not inside:
            span = f"{'(' if open_lo else '['}{lo:g}, {hi:g}{')' if open_hi else ']'}"
            raise argparse.ArgumentTypeError(f"{text}: out of range ({what} in {span})")
        return value

    parse.__name__ = what
    return parse


def add_db_option(p: argparse.ArgumentParser, *, purpose: str = "the recording to read", writes: bool = False) -> None:
    """Add ``--db PATH``; its help names the default and where it came from (resolved by ``db_from_args``)."""
    try:
        chosen = resolve_db_path()
        default = f"{chosen.path}, from {chosen.source}"
    except UsageError:
        # A broken config file is reported when the command runs, not while its help is built.
        default = f"$GPUSCOPE_DB, else `db` in the config file, else {DEFAULT_DB}"
    p.add_argument("--db", metavar="PATH", help=f"{purpose} (default: {default})".replace("%", "%%"))
    if not writes:
        # Ingero spells it -d; here -d is trace's duration, so the short form is refused with a pointer.
        p.add_argument("-d", dest="ingero_db", metavar="PATH", help=argparse.SUPPRESS)


def expanded(flag: str, text: str) -> str:
    """A path option with its leading ``~`` or ``~user`` expanded (as ``--db``'s is); other text as given.

    Raises UsageError naming ``flag`` (none for a positional: "") for a ``~user`` the system does not know.
    """
    return os.fspath(expand_home(text, flag)) if text.startswith("~") else text


def refuse_ingero_flags(args: argparse.Namespace) -> None:
    """Refuse Ingero's spellings that mean something else here (``-d PATH``, ``--nodes``), saying what to type."""
    if getattr(args, "ingero_db", None):
        raise UsageError(
            f"-d {args.ingero_db}: gpuscope names the recording --db (-d is trace's duration)",
            remedy=f"use --db {args.ingero_db}",
        )
    refuse_nodes(args)


def db_from_args(args: argparse.Namespace) -> Path:
    """Resolve the recording a command uses: ``--db`` > ``$GPUSCOPE_DB`` > config ``db`` > the built-in default."""
    refuse_ingero_flags(args)
    if args.db is not None and not args.db.strip():
        # An empty --db (an unset shell variable) must not quietly mean the default recording.
        raise UsageError("--db '': an empty path", remedy="name the recording: --db PATH (or leave --db out)")
    return resolve_db_path(args.db).path


def add_filter_options(p: argparse.ArgumentParser, *, node: bool = True, fleet: bool = False) -> None:
    """Add the sessions (``--session``), the time window (``--since``, ``--from``, ``--to``), ``--pid`` and,
    with ``node``, ``--node``.

    Without ``fleet`` (the command's own ``--nodes``, see ``commands._fleet``),
    also a hidden ``--nodes`` that is refused with a pointer (``refuse_nodes``).
    """
    add_session_option(p)
    p.add_argument(
        "--since",
        metavar="DURATION",
        help="only the last DURATION of the sessions read, counted back from their end, not from now "
        "(e.g. 30s, 5m, 1m30s)",
    )
    p.add_argument("--from", dest="start", metavar="TIME", help=f"from TIME: {TIME_FORMS}")
    p.add_argument("--to", dest="end", metavar="TIME", help="up to TIME (same forms as --from)")
    p.add_argument("--pid", type=pid_arg, action="append", default=[], help="only this process (repeatable)")
    if node:
        p.add_argument("--node", action="append", default=[], help="only this node (repeatable)")
    if not fleet:
        p.add_argument("--nodes", help=argparse.SUPPRESS)


def filter_from_args(args: argparse.Namespace) -> EventFilter:
    """Parse the filter options; raises UsageError for text that is neither a duration nor a time."""
    from gpuscope.query.filters import EventFilter

    refuse_nodes(args)

    return EventFilter.from_options(
        since=args.since,
        start=args.start,
        end=args.end,
        pids=args.pid,
        nodes=getattr(args, "node", None) or [],
        sessions=args.session,
    )


def print_sessions_note(reader: GuardedReader) -> None:
    """On stderr, the one line naming the sessions the default (the last run) left out, if any."""
    note = reader.sessions_note()
    if note:
        print(note, file=sys.stderr)


def refuse_nodes(args: argparse.Namespace) -> None:
    """Ingero's ``--nodes host:port,…`` asks other nodes' agents; say what to do here instead of failing obscurely."""
    if getattr(args, "nodes", None) and not getattr(args, "fleet_capable", False):
        raise UsageError(
            f"--nodes {args.nodes}: this command reads one recording file, it does not ask other nodes",
            remedy="query, explain, stacks, export and nodes take --nodes; keep some nodes of a merged recording with "
            "--node NAME; combine nodes' recordings with `gpuscope merge a.db b.db -o all.db`",
        )


def timeout_from_args(text: str) -> float:
    """Read ``--timeout`` in seconds; raises UsageError for text that is not a duration."""
    return duration_s("--timeout", text, examples="5s, 500ms, 0 for no limit")


def duration_s(flag: str, text: str, *, examples: str = "30s, 5m, 2h or 250ms") -> float:
    """Read a duration option (``30s``, ``5m``, ``1m30s``, ``250ms``) in seconds; raises UsageError naming ``flag``.

    Every form of ``DURATION_FORMS`` is read; negative and unreadable values
    are refused, with ``examples`` and the forms in the remedy.
    """
    try:
        return parse_duration_s(text)
    except ValueError:
        raise UsageError(f"{flag} {text}: not a duration", remedy=f"use e.g. {examples}: {DURATION_FORMS}") from None


def duration_ns(flag: str, text: str, *, examples: str = "500us, 2ms, 1s") -> int:
    """``duration_s`` in whole nanoseconds, exactly (``0.1s`` is 100,000,000 ns)."""
    try:
        return parse_duration_ns(text)
    except ValueError:
        raise UsageError(f"{flag} {text}: not a duration", remedy=f"use e.g. {examples}: {DURATION_FORMS}") from None


def size_bytes(flag: str, text: str) -> int:
    """Read a size option (``500m``, ``10g``, ``64k``, ``0``) in bytes; raises UsageError naming ``flag``."""
    try:
        value = parse_size(text)
    except (ValueError, OverflowError):
        value = -1
    if value < 0:
        raise UsageError(f"{flag} {text}: not a size", remedy="use e.g. 64k, 500m, 10g")
    if value > INT64_MAX:
        raise UsageError(f"{flag} {text}: larger than 8 EiB, the most a 64-bit size holds", remedy="use e.g. 500m, 10g")
    return value
