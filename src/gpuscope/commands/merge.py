"""gpuscope merge: several nodes' (or Ingero's) databases into one."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from gpuscope.errors import UsageError
from gpuscope.query.output import absolute_path, add_json_summary_option, write_json_summary
from gpuscope.recording.merge import merge_recordings
from gpuscope.store.merge import ClockOffset, MergeReport

NAME = "merge"
HELP = "merge databases of several nodes (gpuscope or Ingero files) into one, node-namespaced"

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", metavar="DB", help="databases to merge (gpuscope or Ingero)")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT.db", help="new database to write (replaced at the end)"
    )
    p.add_argument(
        "--force-node",
        action="append",
        default=[],
        metavar="NAME|PATH=NAME",
        help="NAME: node of sessions recorded without one; PATH=NAME: rename every session of that input (repeatable)",
    )
    p.add_argument(
        "--clock-offset",
        action="append",
        default=[],
        metavar="NODE=OFFSET",
        help="add OFFSET (e.g. -3.2ms, 150us, 12ns) to NODE's clock in the events_aligned view (repeatable)",
    )
    add_json_summary_option(p, what="the merged file (output, inputs, events by node, clock offsets)")


def run(args: argparse.Namespace) -> int:
    force_node, rename = None, {}
    for item in args.force_node:
        path, sep, name = item.rpartition("=")
        if sep:
            rename[path] = name
        elif force_node is not None:
            raise UsageError("--force-node NAME given twice", remedy="rename one input with --force-node PATH=NAME")
        else:
            force_node = name
    offsets = [_clock_offset(item) for item in args.clock_offset]
    report = merge_recordings(
        args.inputs, args.output, force_node=force_node, rename=rename, clock_offsets=offsets, progress=_progress
    )
    if args.json:
        write_json_summary(merge_summary(report, absolute_path(args.output), offsets), sys.stdout)
        return 0
    for inp in report.inputs:
        skipped = f", {inp.sessions_skipped} already present" if inp.sessions_skipped else ""
        print(f"{inp.path} ({inp.kind}): {inp.sessions_added} sessions{skipped}, {inp.events:,} events")
    nodes = report.events_by_node()
    print(f"merged into {args.output}: " + ", ".join(f"{n} {c:,} events" for n, c in nodes.items()))
    return 0


def merge_summary(report: MergeReport, output: str, offsets: list[ClockOffset]) -> dict[str, Any]:
    """The ``--json`` object: what was written where, per input and per node (shape in docs/merge.md)."""
    nodes = report.events_by_node()
    return {
        "output": output,
        "events": sum(nodes.values()),
        "events_by_node": nodes,
        "sessions_added": sum(i.sessions_added for i in report.inputs),
        "sessions_skipped": sum(i.sessions_skipped for i in report.inputs),
        "inputs": [
            {
                "path": i.path,
                "kind": i.kind,
                "sessions_added": i.sessions_added,
                "sessions_skipped": i.sessions_skipped,
                "events": i.events,
                "events_by_node": dict(i.events_by_node),
            }
            for i in report.inputs
        ],
        "clock_offsets": [{"node": o.node, "offset_ns": o.offset_ns, "source": o.source} for o in offsets],
    }


def _clock_offset(item: str) -> ClockOffset:
    node, sep, text = item.partition("=")
    m = re.fullmatch(r"\s*([+-]?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*", text)
    if not sep or not node or m is None:
        raise UsageError(f"--clock-offset {item}: expected NODE=OFFSET", remedy="e.g. --clock-offset node-b=-3.2ms")
    return ClockOffset(node, round(float(m.group(1)) * _UNITS[m.group(2) or "ns"]))


def _progress(line: str) -> None:
    print(line, file=sys.stderr)
