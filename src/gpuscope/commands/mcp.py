"""gpuscope mcp: the recording as MCP tools for AI assistants (stdio, or streamable HTTPS with --http)."""

from __future__ import annotations

import argparse
import json
import sys

from gpuscope.commands._options import add_db_option, db_from_args

NAME = "mcp"
HELP = "serve a recording to AI assistants over MCP: stdio (claude mcp add gpuscope -- gpuscope mcp) or --http"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from gpuscope.serve.server import add_server_options

    add_db_option(p, purpose="the recording the tools read")
    add_server_options(
        p,
        default_addr="",
        addr_flag="--http",
        addr_help="serve streamable HTTP (HTTPS by default) at HOST:PORT/mcp instead of stdio, e.g. 127.0.0.1:8081",
    )
    p.add_argument("--json", action="store_true", help="with --http: print one JSON object (url, token) at start")


def run(args: argparse.Namespace) -> int:
    from gpuscope.recording.open import open_recording
    from gpuscope.serve.mcp_server import build_server

    db = db_from_args(args)
    if db.exists():
        open_recording(db).close()  # a damaged recording is reported now, not to the first tool call
    else:
        # An assistant is set up before the first trace: serve anyway (check and run_demo work; the tools
        # that read a recording say there is none yet, until `trace` writes it).
        print(f"note: no recording yet at {db}: the tools that read one say so until it is traced", file=sys.stderr)
    if not args.addr:
        import anyio

        # stdio: stdout carries the protocol; nothing else may be printed there.
        anyio.run(build_server(db).run_stdio_async)
        return 0
    from gpuscope.serve.app import mcp_app
    from gpuscope.serve.server import listen, print_start, serve

    listener = listen(args)
    info = listener.info(mcp=f"{listener.base_url}mcp", recording=str(db))
    if args.json:
        print(json.dumps(info), flush=True)
    else:
        print_start(
            f"mcp: serving {db}",
            listener,
            [f"MCP  {info['mcp']} (streamable HTTP; send Authorization: Bearer {listener.token})"],
        )
    serve(mcp_app(db, listener.guard), listener, verbose=args.verbose)
    return 0
