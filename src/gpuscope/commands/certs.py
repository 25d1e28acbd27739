"""gpuscope certs init: a CA, a server certificate per node and a client certificate, for mutual TLS."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NAME = "certs"
HELP = "certs init DIR --nodes a,b,c: make a CA, node and client certificates for a secure fleet (mutual TLS)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["init"], help="init: create the CA and the certificates")
    p.add_argument("folder", metavar="DIR", help="where to write them (a new folder; keys are mode 0600)")
    p.add_argument("--nodes", required=True, metavar="NAME,...", help="the nodes' host names (or addresses)")
    p.add_argument(
        "--also-name",
        action="append",
        default=[],
        metavar="NAME",
        help="another name every server certificate answers to (e.g. localhost, 127.0.0.1; repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the files written as one JSON object")


def run(args: argparse.Namespace) -> int:
    from gpuscope.fleet.certs import init_fleet

    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
    issued = init_fleet(Path(args.folder), nodes, args.also_name)
    if args.json:
        doc = {
            "ca": str(issued.ca),
            "servers": {n: {"cert": str(c), "key": str(k)} for n, (c, k) in issued.servers.items()},
            "client": {"cert": str(issued.client[0]), "key": str(issued.client[1])},
        }
        print(json.dumps(doc, indent=2))
        return 0
    folder = Path(args.folder)
    print(f"wrote a CA, {len(nodes)} server certificate(s) and a client certificate to {folder}", file=sys.stderr)
    print("On each node (copy ca.pem and that node's folder there):")
    for n, (cert, key) in issued.servers.items():
        print(f"  {n}: gpuscope dashboard --addr 0.0.0.0:8443 --allow-host {n} --tls-cert {cert} --tls-key {key} "
              f"--ca-cert {issued.ca}")  # fmt: skip
    print("From the client:")
    print(
        f"  gpuscope nodes --nodes {','.join(f'{n}:8443' for n in nodes)} --ca-cert {issued.ca} "
        f"--client-cert {issued.client[0]} --client-key {issued.client[1]}"
    )
    return 0
