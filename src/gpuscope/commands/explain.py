"""gpuscope explain: ranked findings (symptom, cause with evidence and effect size, fix) from a recording."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from urllib.parse import urlencode

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.bpf.libbpf import keep_freed_memory
from gpuscope.commands._fleet import add_fleet_options, fleet_client, wants_fleet, warn
from gpuscope.commands._options import add_db_option, add_filter_options, db_from_args, filter_from_args
from gpuscope.errors import UsageError
from gpuscope.model.findings import Severity
from gpuscope.query.filters import EventFilter
from gpuscope.query.output import OutputFormat, add_output_options, chosen_format
from gpuscope.render.colour import SEVERITY_STYLES, write_styled
from gpuscope.render.explain import render_fleet_findings, render_report
from gpuscope.store.findings_history import save_findings

NAME = "explain"
HELP = "explain why GPU calls were slow: ranked findings with evidence, effect sizes and fixes"

# The report, not rows: text for people (in a pipe too: `gpuscope explain | less`), or one JSON document.
_FORMATS = (OutputFormat.TABLE, OutputFormat.JSON)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_option(p)
    add_filter_options(p, node=False, fleet=True)
    p.add_argument("--per-process", action="store_true", help="per-process CUDA API breakdown")
    p.add_argument("--min-severity", default="low", metavar="LEVEL", help="low, medium, high or critical")
    p.add_argument(
        "--save-findings",
        action="store_true",
        help="append the findings to the recording's findings table (the only time explain writes to it)",
    )
    p.add_argument("--no-store", action="store_true", help=argparse.SUPPRESS)  # the default since findings are opt-in
    add_output_options(
        p,
        formats=_FORMATS,
        table_help="the report as text",
        json_help="one JSON document (shape: `gpuscope docs explain`)",
    )
    add_fleet_options(p)


def explain_options(f: EventFilter, min_severity: Severity) -> ExplainOptions:
    """Map a parsed ``--session/--since/--from/--to/--pid`` onto the engine's options.

    Raises UsageError for ``--since`` with ``--from``/``--to`` (two ends would be fixed at once).
    """
    if f.since_ns is not None and (f.start is not None or f.end is not None):
        raise UsageError("--since cannot be combined with --from/--to")
    return ExplainOptions(
        since_ns=f.since_ns,
        from_ns=f.start.offset_ns if f.start else None,
        from_wall_ns=f.start.wall_ns if f.start else None,
        to_ns=f.end.offset_ns if f.end else None,
        to_wall_ns=f.end.wall_ns if f.end else None,
        from_end_ns=f.start.before_end_ns if f.start else None,
        to_end_ns=f.end.before_end_ns if f.end else None,
        pids=f.pids,
        min_severity=min_severity,
        sessions=f.sessions,
    )


def run(args: argparse.Namespace) -> int:
    try:
        min_sev = Severity.parse(args.min_severity)
    except ValueError as exc:
        raise UsageError(f"--min-severity: {exc}") from None
    if wants_fleet(args):
        return _fleet(args, min_sev)
    opts = explain_options(filter_from_args(args), min_sev)
    db = db_from_args(args)
    keep_freed_memory()  # a command that exits when done: its numpy temporaries are reused, not faulted in again
    report = explain_db(db, opts)
    if args.save_findings and report.findings:
        w = report.window
        session_id = w.session_ids[0] if len(w.session_ids) == 1 else None
        save_findings(db, report.findings, session_id=session_id, window_start_ns=w.start_ns, window_end_ns=w.end_ns)
        report = replace(report, stored=True)
    if chosen_format(args.output) is OutputFormat.JSON:
        print(json.dumps(report.as_dict(per_process=args.per_process), indent=2))
    else:
        write_styled(render_report(report, per_process=args.per_process), sys.stdout, SEVERITY_STYLES)
        for note in report.notes:
            print(note, file=sys.stderr)
    return 0


def _fleet(args: argparse.Namespace, min_sev: Severity) -> int:
    """Each node explains its own recording; the findings are merged, most severe first, each naming its node."""
    from gpuscope.fleet.gather import gather_findings, merge_findings
    from gpuscope.fleet.stragglers import fleet_stragglers

    if args.start or args.end or len(args.pid) > 1:
        raise UsageError("with --nodes, explain takes --since and at most one --pid")
    params = {
        "since": args.since,
        "pid": args.pid[0] if args.pid else None,
        "min_severity": min_sev.name.lower(),
        # Each node reads its own recording's sessions: its last run unless told (numbers are each node's own).
        "session": str(args.session) if args.session.given else None,
    }
    query = urlencode({k: v for k, v in params.items() if v is not None})
    client = fleet_client(args)
    results = client.get(f"/api/v1/findings?{query}")
    got = gather_findings(results)
    failed = frozenset(r.node.address for r in results if not r.ok)  # warned about once, here
    cross, more, notes = fleet_stragglers(client, since=args.since, reported=failed)
    findings = merge_findings(got.findings, [f for f in cross if f.finding.severity >= min_sev])
    warnings = got.warnings + more
    warn(warnings)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if chosen_format(args.output) is OutputFormat.JSON:
        print(json.dumps({"findings": [f.as_dict() for f in findings], "warnings": warnings, "notes": notes}, indent=2))
        return 0
    write_styled(render_fleet_findings(findings), sys.stdout, SEVERITY_STYLES)
    return 0
