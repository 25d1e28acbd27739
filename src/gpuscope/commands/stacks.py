"""gpuscope stacks: the call stacks behind CUDA calls, most frequent first."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from urllib.parse import urlencode

from gpuscope.commands._fleet import add_fleet_options, fleet_client, wants_fleet, warn
from gpuscope.commands._options import (
    add_db_option,
    add_filter_options,
    bounded_int,
    db_from_args,
    duration_ns,
    filter_from_args,
)
from gpuscope.errors import UsageError
from gpuscope.model.printable import printable
from gpuscope.query import OutputFormat, add_output_options, chosen_format, write_rows
from gpuscope.query.filters import EventFilter, apply_filter
from gpuscope.recording import open_recording
from gpuscope.stacks.profile import cpu_profile, top_functions
from gpuscope.stacks.report import top_stacks

NAME = "stacks"
HELP = (
    "who made the CUDA calls: distinct call stacks (native frames and Python lines), most calls first; "
    "--cpu: where the traced threads spent their CPU time (on-CPU samples)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_option(p)
    p.add_argument(
        "--cpu",
        action="store_true",
        help="the on-CPU profile instead: the functions and stacks the traced threads were sampled in "
        "(`trace --cpu-samples`); export it for a flame graph with `gpuscope export --format speedscope`",
    )
    p.add_argument("--op", help="only calls of this API (e.g. cudaMalloc)")
    add_filter_options(p, fleet=True)  # the window, --pid and --node, as in every reading command
    p.add_argument("--min-duration", metavar="DURATION", help="only calls at least this long (e.g. 1ms)")
    p.add_argument(
        "--limit", type=bounded_int(1, 10_000, "a stack count"), default=10, help="how many stacks (default 10)"
    )
    add_output_options(p)
    add_fleet_options(p)


def run(args: argparse.Namespace) -> int:
    min_ns = None
    if args.min_duration:
        min_ns = duration_ns("--min-duration", args.min_duration, examples="500us, 2ms")
    if args.cpu:
        if wants_fleet(args):
            raise UsageError("--cpu reads one recording", remedy="merge the nodes' recordings first (gpuscope merge)")
        if args.op or min_ns is not None:
            raise UsageError("--cpu profiles threads, not calls: --op and --min-duration do not apply")
        return _cpu(args)
    if wants_fleet(args):
        return _fleet(args, min_ns)
    conn = _filtered(args)
    try:
        stacks = top_stacks(conn, op=args.op, min_duration_ns=min_ns, limit=args.limit)
    finally:
        conn.close()
    fmt = chosen_format(args.output)
    if fmt is OutputFormat.TABLE:
        if not stacks:
            print("no stacks recorded (traced with --no-stack, or no CUDA call matched)", file=sys.stderr)
        for s in stacks:
            marker = f"  [{s.marker}]" if s.marker else ""
            _say(f"{s.calls} calls ({s.share:.0%}) of {s.op}, {s.total_duration_ns / 1e6:.3f} ms total{marker}")
            for f in s.frames:
                _say(f"    {f.render()}")
            print()
        return 0
    cols = ["stack_hash", "op", "calls", "share", "total_duration_ns", "call_site", "frames", "marker"]
    rows = [
        (
            s.stack_hash,
            s.op,
            s.calls,
            round(s.share, 4),
            s.total_duration_ns,
            s.call_site,
            [f.render() for f in s.frames],
            s.marker,
        )
        for s in stacks
    ]
    write_rows(cols, rows, fmt, sys.stdout)
    return 0


def _filtered(args: argparse.Namespace) -> sqlite3.Connection:
    """The recording, its calls and samples seen through the window, --pid and --node (gpuscope.query.filters)."""
    f: EventFilter = filter_from_args(args)
    conn = open_recording(db_from_args(args))
    try:
        note = apply_filter(conn, f).note()
    except BaseException:
        conn.close()
        raise
    if note:
        print(note, file=sys.stderr)
    return conn


def _cpu(args: argparse.Namespace) -> int:
    """The on-CPU profile: top functions (self), then the top stacks, by samples."""
    conn = _filtered(args)
    try:
        profile = cpu_profile(conn)
    finally:
        conn.close()
    hot = top_functions(profile, args.limit)
    fmt = chosen_format(args.output)
    if fmt is not OutputFormat.TABLE:
        cols = ["function", "file", "line", "samples", "share"]
        write_rows(cols, ([h.function, h.file, h.line, h.samples, round(h.share, 4)] for h in hot), fmt, sys.stdout)
        return 0
    if not profile.samples:
        print("no on-CPU samples recorded (traced with --cpu-samples off or --no-stack, or an older gpuscope)",
              file=sys.stderr)  # fmt: skip
        return 0
    rate = (
        f" at {profile.hz} a second: ≈{profile.estimated_cpu_s():.1f} s of CPU time (estimated)" if profile.hz else ""
    )
    who = f" of pid {', '.join(map(str, args.pid))}" if args.pid else ""
    print(f"{profile.samples:,} on-CPU samples{who}{rate}")
    print()
    print("functions (where the samples were; the user's own code where a stack has it):")
    for h in hot:
        _say(f"  {h.share:6.1%}  {h.samples:>7,}  {h.render()}")
    print()
    for st in profile.stacks[: args.limit]:
        print(f"{st.samples} samples ({st.samples / profile.samples:.0%}), pid {st.pid} tid {st.tid}")
        for f in st.frames:
            _say(f"    {f.render()}")
        print()
    return 0


def _fleet(args: argparse.Namespace, min_ns: int | None) -> int:
    """Each node's top stacks, tagged with the node."""
    from gpuscope.fleet.gather import gather_stacks

    if args.since or args.start or args.end or args.node or len(args.pid) > 1:
        raise UsageError("with --nodes, stacks takes --op, --min-duration and at most one --pid")
    params = {
        "op": args.op,
        "pid": args.pid[0] if args.pid else None,
        "limit": min(max(args.limit, 1), 100),
        "min_duration_ns": min_ns,
    }
    got = gather_stacks(
        fleet_client(args).get("/api/v1/stacks?" + urlencode({k: v for k, v in params.items() if v is not None}))
    )
    warn(got.warnings)
    fmt = chosen_format(args.output)
    if fmt is OutputFormat.TABLE:
        for s in got.stacks:
            marker = f"  [{s['marker']}]" if s.get("marker") else ""
            _say(f"{s['node']}: {s['calls']} calls ({s['share']:.0%}) of {s['op']}, "
                 f"{s['total_duration_ns'] / 1e6:.3f} ms total{marker}")  # fmt: skip
            for frame in s["frames"]:
                _say(f"    {frame}")
            print()
        return 0
    cols = ["node", "op", "calls", "share", "total_duration_ns", "call_site", "frames", "marker"]
    write_rows(cols, ([s.get(c) for c in cols] for s in got.stacks), fmt, sys.stdout)
    return 0


def _say(line: str) -> None:
    """Print one line of the table for people: names and frames are the traced programs' own text."""
    print(printable(line))
