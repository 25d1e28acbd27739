"""gpuscope import: convert an Ingero database into a gpuscope database."""

from __future__ import annotations

import argparse
import sys

from gpuscope.commands._options import expanded
from gpuscope.importers import import_file
from gpuscope.query.output import absolute_path, add_json_summary_option, write_json_summary

NAME = "import"
HELP = "convert an Ingero database (events, stacks, causal chains, snapshots) into a gpuscope database"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="INGERO.db", help="database written by `ingero trace`")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT.db", help="new database to write (replaced at the end)"
    )
    p.add_argument("--node", help="node name for rows recorded without one (renames a single-node file)")
    add_json_summary_option(p, what="the new file (output, source, counts, notes)")


def run(args: argparse.Namespace) -> int:
    args.source, args.output = expanded("", args.source), expanded("-o", args.output)
    report = import_file(args.source, args.output, node=args.node, progress=lambda s: print(s, file=sys.stderr))
    if args.json:
        write_json_summary(
            {"output": absolute_path(args.output), "source": report.source_path, **report.as_dict()}, sys.stdout
        )
        return 0
    ops = ", ".join(f"{op} {n:,}" for op, n in report.events_by_op.items())
    print(f"imported {report.source_path} ({', '.join(report.nodes) or 'no node'}) into {args.output}")
    print(f"  {report.sessions} sessions, {report.events:,} events ({ops or 'none'})")
    print(
        f"  {report.stacks} stacks, {report.chains} causal chains, {report.snapshots} snapshots, "
        f"{report.aggregates} aggregate rows, {report.processes} processes, {report.cgroups} cgroups"
    )
    for note in report.notes:
        print(f"  note: {note}")
    if report.other_rows:
        kept = ", ".join(f"{t} {n}" for t, n in report.other_rows.items())
        print(f"  kept as JSON in imported_rows: {kept}")
    return 0
