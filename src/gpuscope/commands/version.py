"""gpuscope version: versions of gpuscope, its commit, libbpf and the kernel."""

from __future__ import annotations

import argparse
import json
import platform

from gpuscope.agent.versions import version_info
from gpuscope.query.output import OutputFormat, add_output_options, chosen_format

NAME = "version"
HELP = "print gpuscope, commit, libbpf and kernel versions"


_FORMATS = (OutputFormat.TABLE, OutputFormat.JSON)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_output_options(p, formats=_FORMATS, table_help="one line per component", json_help="one JSON object")


def run(args: argparse.Namespace) -> int:
    info = version_info()
    if chosen_format(args.output) is OutputFormat.JSON:
        print(json.dumps(info, sort_keys=True))
    else:
        print(f"gpuscope {info['version']} (commit {info['commit']})")
        print(f"libbpf   {info['libbpf']}")
        print(f"kernel   {info['kernel']} ({platform.machine()})")
        print(f"python   {info['python']}")
    return 0
