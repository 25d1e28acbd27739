"""Options shared by the commands that can ask many nodes (``--nodes``) and the client they build."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuscope.fleet.client import FleetClient


def add_fleet_options(p: argparse.ArgumentParser, *, timeout: bool = True) -> None:
    """``--nodes`` and the client's TLS files; ``--timeout`` unless the command has its own."""
    g = p.add_argument_group("fleet (ask other nodes' `gpuscope dashboard` instead of a local file)")
    g.add_argument(
        "--nodes",
        metavar="HOST:PORT,...",
        help="ask these nodes (default: `nodes` of [fleet] in the config file, when --fleet is given)",
    )
    g.add_argument("--fleet", action="store_true", help="ask the nodes listed in the config file's [fleet] table")
    if timeout:
        g.add_argument(
            "--timeout",
            default="5s",
            metavar="DURATION",
            help="the time limit of each whole request to a node, connection to last byte (default 5s)",
        )
    g.add_argument("--ca-cert", metavar="FILE", help="the CA that signed the nodes' certificates")
    g.add_argument("--client-cert", metavar="FILE", help="this client's certificate, for nodes that demand one")
    g.add_argument("--client-key", metavar="FILE", help="its private key (mode 0600)")
    g.add_argument("--insecure-http", action="store_true", help="plain HTTP, to loopback nodes only")
    p.set_defaults(fleet_capable=True)


def wants_fleet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "nodes", None) or getattr(args, "fleet", False))


def fleet_client(args: argparse.Namespace) -> FleetClient:
    """The client for ``--nodes`` (or the config's fleet); raises UsageError for bad addresses or TLS files.

    ``--timeout 0`` is refused: "no limit" would let one node that never answers hold the command forever.
    """
    from gpuscope.commands._options import duration_s
    from gpuscope.errors import UsageError
    from gpuscope.fleet.client import configured_client

    timeout = duration_s("--timeout", args.timeout, examples="5s, 500ms")
    if not timeout > 0:
        raise UsageError(
            f"--timeout {args.timeout}: a node must answer within a time limit, more than 0",
            remedy="give the longest a node may take, e.g. --timeout 30s",
        )
    return configured_client(
        args.nodes,
        ca_cert=Path(args.ca_cert) if args.ca_cert else None,
        client_cert=Path(args.client_cert) if args.client_cert else None,
        client_key=Path(args.client_key) if args.client_key else None,
        plain_http=args.insecure_http,
        timeout_s=timeout,
    )


def warn(lines: list[str]) -> None:
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)
