"""gpuscope version: versions of gpuscope, its commit, libbpf and the kernel."""

from __future__ import annotations

import argparse
import json
import platform

from gpuscope.agent.versions import version_info

NAME = "version"
HELP = "print gpuscope, commit, libbpf and kernel versions"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON object")


def run(args: argparse.Namespace) -> int:
    info = version_info()
    if args.json:
        print(json.dumps(info, sort_keys=True))
    else:
        print(f"gpuscope {info['version']} (commit {info['commit']})")
        print(f"libbpf   {info['libbpf']}")
        print(f"kernel   {info['kernel']} ({platform.machine()})")
        print(f"python   {info['python']}")
    return 0
