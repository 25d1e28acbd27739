"""gpuscope merge: several nodes' (or Ingero's) databases into one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpuscope.commands._options import expanded
from gpuscope.errors import UsageError
from gpuscope.model.units import fmt_ns, parse_duration_ns
from gpuscope.query.output import absolute_path, add_json_summary_option, write_json_summary
from gpuscope.recording.merge_formats import merge_recordings
from gpuscope.store.merge_recordings import ClockOffset, MergeReport

NAME = "merge"
HELP = "merge databases of several nodes (gpuscope or Ingero files) into one, node-namespaced"


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
    p.add_argument(
        "--clock-offsets-from",
        metavar="FILE",
        help="offsets measured by `gpuscope nodes --json > FILE`: each node's clock is put on the client's",
    )
    add_json_summary_option(p, what="the merged file (output, inputs, events by node, clock offsets)")


def run(args: argparse.Namespace) -> int:
    args.output = expanded("-o", args.output)  # the inputs' ~ is expanded with their other names (merge_recordings)
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
    if args.clock_offsets_from:
        named = {o.node for o in offsets}
        offsets += [
            o
            for o in measured_offsets(Path(expanded("--clock-offsets-from", args.clock_offsets_from)))
            if o.node not in named
        ]
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
    """``NODE=OFFSET``: a signed duration in the shared parser's units; a unit is required (12 is not 12 s or 12 ns)."""
    node, sep, text = item.partition("=")
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-").strip()
    try:
        if not sep or not node or not body or body.replace(".", "", 1).isdigit():
            raise ValueError
        magnitude = parse_duration_ns(body)
    except ValueError:
        raise UsageError(
            f"--clock-offset {item}: expected NODE=OFFSET with a unit", remedy="e.g. --clock-offset node-b=-3.2ms"
        ) from None
    return ClockOffset(node, sign * magnitude)


def measured_offsets(path: Path) -> list[ClockOffset]:
    """Offsets from ``gpuscope nodes --json``: a node ``offset`` ahead is moved back by it, onto the client's clock.

    Nodes that did not answer, or whose recording names no node, are left out;
    raises UsageError for a file that is not that command's output.
    """
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--clock-offsets-from {path}: not readable JSON ({exc})") from None
    except RecursionError:  # arrays nested thousands deep: json parses them recursively
        raise UsageError(f"--clock-offsets-from {path}: not readable JSON (nested too deeply)") from None
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise UsageError(f"--clock-offsets-from {path}: expected the list `gpuscope nodes --json` prints")
    out = []
    for r in doc:
        if r.get("ok") and isinstance(r.get("node"), str) and isinstance(r.get("clock_offset_ns"), int):
            uncertainty = int(r.get("uncertainty_ns") or 0)
            source = f"measured by gpuscope nodes from {r.get('address')}, ±{fmt_ns(uncertainty)}"
            out += [ClockOffset(n.strip(), -int(r["clock_offset_ns"]), source) for n in r["node"].split(",")]
    return out


def _progress(line: str) -> None:
    print(line, file=sys.stderr)
