"""gpuscope nodes: each node's reachability, version, recording span and clock offset (NTP-style)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpuscope.commands._fleet import add_fleet_options, fleet_client
from gpuscope.commands._options import bounded_int
from gpuscope.fleet import CLOCK_SAMPLES

NAME = "nodes"
HELP = "ask each node (--nodes or the config's [fleet]): reachable?, version, recording span, clock offset"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_fleet_options(p)
    p.add_argument(
        "--samples",
        type=bounded_int(3, 100, "a sample count"),
        default=CLOCK_SAMPLES,
        metavar="N",
        help=f"clock samples per node, the one with the shortest round trip kept (at least 3; default {CLOCK_SAMPLES})",
    )
    p.add_argument("--json", action="store_true", help="a JSON list, one object per node")


def run(args: argparse.Namespace) -> int:
    from gpuscope.analysis.recording_state import iso_wall
    from gpuscope.errors import GpuscopeError
    from gpuscope.model.units import fmt_ns

    if not args.nodes and not args.fleet:
        args.fleet = True  # `gpuscope nodes` alone: the configured fleet
    client = fleet_client(args)
    overviews = client.get("/api/v1/overview")
    clocks = client.clock(max(3, args.samples))
    out = []
    for ov, ck in zip(overviews, clocks, strict=True):
        row: dict[str, Any] = {"node": None, "address": ov.node.address, "ok": ov.ok and ck.ok}
        if ov.ok:
            w = ov.data.get("window", {})
            row.update(
                node=", ".join(ov.data.get("nodes", [])) or None,
                version=ov.data.get("version"),
                events=ov.data.get("events"),
                recording=ov.data.get("recording"),
                start_wall_ns=w.get("start_wall_ns"),
                end_wall_ns=w.get("end_wall_ns"),
            )
        if ck.ok:
            row.update(ck.data)
        row["error"] = ov.error or ck.error
        out.append(row)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for r in out:
            if not r["ok"]:
                print(f"{r['address']:<24} DOWN  {r['error']}")
                continue
            span = f"{iso_wall(r.get('start_wall_ns')) or '?'} .. {iso_wall(r.get('end_wall_ns')) or '?'}"
            offset = int(r["clock_offset_ns"])
            sign = "+" if offset >= 0 else "-"
            print(
                f"{r['address']:<24} ok    node {r['node'] or '?'}  gpuscope {r.get('version') or '?'}  "
                f"{int(r.get('events') or 0):,} events  {span}  "
                f"clock {sign}{fmt_ns(abs(offset))} ± {fmt_ns(int(r['uncertainty_ns']))}"
            )
    if out and not any(r["ok"] for r in out):
        raise GpuscopeError(
            "no node answered", remedy="check the addresses and TLS files; each node runs `gpuscope dashboard`"
        )
    return 0
