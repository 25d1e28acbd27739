"""gpuscope check: can this machine trace? What would gpuscope attach to?"""

from __future__ import annotations

import argparse
import json
import sys

from gpuscope.agent.readiness import Status, run_checks, tracing_possible
from gpuscope.errors import EXIT_ENVIRONMENT
from gpuscope.query.output import OutputFormat, add_output_options, chosen_format
from gpuscope.render.colour import write_styled

NAME = "check"
HELP = "check kernel, BPF, libbpf and CUDA libraries; exit 3 when tracing cannot work"

_MARK = {Status.OK: "[ok]  ", Status.WARN: "[warn]", Status.FAIL: "[FAIL]", Status.INFO: "[info]"}
# On a terminal: each mark in its status's colour, and the verdict when tracing is not possible.
_STYLES = (
    (r"^\[ok\]", "green"),
    (r"^\[warn\]", "yellow"),
    (r"^\[FAIL\]", "bold red"),
    (r"^\[info\]", "cyan"),
    (r"NOT possible", "bold red"),
)
_FORMATS = (OutputFormat.TABLE, OutputFormat.JSON)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_output_options(p, formats=_FORMATS, table_help="one line per check", json_help="one JSON document")


def run(args: argparse.Namespace) -> int:
    results = run_checks()
    ok = tracing_possible(results)
    if chosen_format(args.output) is OutputFormat.JSON:
        print(json.dumps({"tracing_possible": ok, "checks": [r.as_dict() for r in results]}, indent=2))
    else:
        lines = []
        for r in results:
            lines.append(f"{_MARK[r.status]} {r.name:<18} {r.detail}")
            if r.remedy and r.status in (Status.FAIL, Status.WARN):
                lines.append(f"       {'':<18} fix: {r.remedy}")
        lines.append("\ntracing: " + ("ready" if ok else "NOT possible (see [FAIL] lines)"))
        write_styled("\n".join(lines), sys.stdout, _STYLES)
    return 0 if ok else EXIT_ENVIRONMENT
