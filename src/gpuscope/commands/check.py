"""gpuscope check: can this machine trace? What would gpuscope attach to?"""

from __future__ import annotations

import argparse
import json
import sys

from gpuscope.agent.readiness import Status, run_checks, tracing_possible
from gpuscope.errors import EXIT_ENVIRONMENT
from gpuscope.query.output import OutputFormat, add_output_options, chosen_format

NAME = "check"
HELP = "check kernel, BPF, libbpf and CUDA libraries; exit 3 when tracing cannot work"

_MARK = {Status.OK: "[ok]  ", Status.WARN: "[warn]", Status.FAIL: "[FAIL]", Status.INFO: "[info]"}
_FORMATS = (OutputFormat.TABLE, OutputFormat.JSON)
_IN_PIPE = OutputFormat.TABLE


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_output_options(
        p, formats=_FORMATS, in_pipe=_IN_PIPE, table_help="one line per check", json_help="one JSON document"
    )


def run(args: argparse.Namespace) -> int:
    results = run_checks()
    ok = tracing_possible(results)
    if chosen_format(args.output, sys.stdout, in_pipe=_IN_PIPE) is OutputFormat.JSON:
        print(json.dumps({"tracing_possible": ok, "checks": [r.as_dict() for r in results]}, indent=2))
    else:
        for r in results:
            print(f"{_MARK[r.status]} {r.name:<18} {r.detail}")
            if r.remedy and r.status in (Status.FAIL, Status.WARN):
                print(f"       {'':<18} fix: {r.remedy}")
        print("\ntracing: " + ("ready" if ok else "NOT possible (see [FAIL] lines)"))
    return 0 if ok else EXIT_ENVIRONMENT
