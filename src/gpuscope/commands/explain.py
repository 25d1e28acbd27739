"""gpuscope explain: ranked findings (symptom, cause with evidence and effect size, fix) from a recording."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.errors import UsageError
from gpuscope.model.findings import Severity
from gpuscope.model.units import parse_duration_s
from gpuscope.render.explain import render_report
from gpuscope.store.connect import default_db_path
from gpuscope.store.findings import save_findings

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
    p.add_argument(
        "--save-findings",
        action="store_true",
        help="append the findings to the recording's findings table (the only time explain writes to it)",
    )
    p.add_argument("--no-store", action="store_true", help=argparse.SUPPRESS)  # the default since findings are opt-in
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
    )
    db = args.db or default_db_path()
    report = explain_db(db, opts)
    if args.save_findings and report.findings:
        w = report.window
        save_findings(db, report.findings, session_id=w.session_ids[0] if len(w.session_ids) == 1 else None,
                      window_start_ns=w.start_ns, window_end_ns=w.end_ns)  # fmt: skip
        report = replace(report, stored=True)
    if args.json:
        print(json.dumps(report.as_dict(per_process=args.per_process), indent=2))
    else:
        print(render_report(report, per_process=args.per_process))
        for note in report.notes:
            print(note, file=sys.stderr)
    return 0
