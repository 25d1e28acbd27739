"""gpuscope explain: ranked findings (symptom, cause with evidence and effect size, fix) from a recording."""

from __future__ import annotations

import argparse
import json
import sys

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.errors import UsageError
from gpuscope.model.findings import Severity
from gpuscope.report.explain import render_report
from gpuscope.report.units import parse_duration_s
from gpuscope.store.connect import default_db_path

NAME = "explain"
HELP = "explain why GPU calls were slow: ranked findings with evidence, effect sizes and fixes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help=f"database path (default $GPUSCOPE_DB or {default_db_path()})")
    p.add_argument("--since", help="analyse the last DURATION of the recording (relative to its END, e.g. 5m)")
    p.add_argument(
        "--from", dest="from_", metavar="T", help="start, as an offset from the recording's start (e.g. 30s)"
    )
    p.add_argument("--to", metavar="T", help="end, as an offset from the recording's start (e.g. 2m)")
    p.add_argument("--pid", type=int, action="append", default=[], help="only these processes (repeatable)")
    p.add_argument("--per-process", action="store_true", help="per-process CUDA API breakdown")
    p.add_argument("--min-severity", default="low", metavar="LEVEL", help="low, medium, high or critical")
    p.add_argument("--no-store", action="store_true", help="do not append findings to the findings table")
    p.add_argument("--json", action="store_true", help="one JSON document (shape in docs/explain.md)")


def _duration_ns(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = parse_duration_s(text)
    except ValueError:
        raise UsageError(f"{flag} {text}: not a duration (e.g. 30s, 5m, 2h)") from None
    if value < 0:
        raise UsageError(f"{flag} {text}: must not be negative")
    return int(value * 1e9)


def run(args: argparse.Namespace) -> int:
    if args.since and (args.from_ or args.to):
        raise UsageError("--since cannot be combined with --from/--to")
    try:
        min_sev = Severity.parse(args.min_severity)
    except ValueError as exc:
        raise UsageError(f"--min-severity: {exc}") from None
    opts = ExplainOptions(
        since_ns=_duration_ns("--since", args.since),
        from_ns=_duration_ns("--from", args.from_),
        to_ns=_duration_ns("--to", args.to),
        pids=tuple(args.pid),
        min_severity=min_sev,
        store=not args.no_store,
    )
    db = args.db or default_db_path()
    report = explain_db(db, opts)
    if args.json:
        print(json.dumps(report.as_dict(per_process=args.per_process), indent=2))
    else:
        print(render_report(report, per_process=args.per_process))
        for note in report.notes:
            print(note, file=sys.stderr)
    return 0
