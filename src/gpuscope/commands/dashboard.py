"""gpuscope dashboard: serve a recording over HTTPS: the JSON API (/api/v1), a web page, and optionally MCP."""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

from gpuscope.commands._options import add_db_option, db_from_args, expanded

# The longest the start line waits for the first screen's data (a recording so large that it takes longer is
# announced anyway: the page shows its progress while it is read).
FIRST_SCREEN_WAIT_S = 2.0

NAME = "dashboard"
HELP = "serve a recording over HTTPS: a web dashboard and the JSON API (token-protected, read-only)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from gpuscope.serve.server import add_server_options

    add_db_option(p, purpose="the recording to serve (may still be recording)")
    add_server_options(p)
    p.add_argument(
        "--baseline",
        metavar="PATH",
        help="a recording of the run before (a good run): the page adds the per-op comparison with it, as "
        "`gpuscope diff PATH --db` prints it, as a chart",
    )
    p.add_argument("--mcp", action="store_true", help="also serve MCP (streamable HTTP) at /mcp on the same port")
    p.add_argument("--json", action="store_true", help="print one JSON object (url, token, fingerprint) at start")


def run(args: argparse.Namespace) -> int:
    from gpuscope.errors import GpuscopeError
    from gpuscope.recording.open import open_recording
    from gpuscope.serve.app import create_app
    from gpuscope.serve.server import listen, print_start, serve

    db = db_from_args(args)
    open_recording(db).close()  # a missing or damaged recording is reported now, not on the first request
    baseline = Path(expanded("--baseline", args.baseline)) if args.baseline else None
    if baseline is not None:
        try:
            open_recording(baseline).close()
        except GpuscopeError as exc:
            # The same error, with the remedy of this option: the recording's (--db PATH) is not the way out.
            exc.remedy = "pass --baseline an earlier recording of the same job (a file `gpuscope trace` wrote)"
            raise
    listener = listen(args)
    first_screen = threading.Event()
    app = create_app(db, listener.guard, mcp=args.mcp, baseline=baseline, first_screen=first_screen)
    mcp_url = f"{listener.base_url}mcp" if args.mcp else None
    info = listener.info(api=f"{listener.base_url}api/v1/", mcp=mcp_url, recording=str(db))

    def announce() -> None:
        # Once serving (app built and warmed, server started) and the first screen's data is computed (at most
        # FIRST_SCREEN_WAIT_S): whoever waits for this line may ask at once, and a page opened from the link
        # draws without waiting for the recording to be read (on 1M events, 0.7-0.8 s after opening became
        # 0.4 s: the page's scripts no longer wait behind the reading). The wait is on a thread: the server
        # answers meanwhile whoever knows its address already.
        first_screen.wait(FIRST_SCREEN_WAIT_S)
        if args.json:
            print(json.dumps(info), flush=True)
            return
        lines = [f"open {info['url']}", f"API  {info['api']} (Authorization: Bearer <token>)"]
        if mcp_url:
            lines.append(f"MCP  {mcp_url} (streamable HTTP, same token)")
        print_start(f"dashboard: serving {db}", listener, lines)

    def ready() -> None:
        threading.Thread(target=announce, name="gpuscope-announce", daemon=True).start()

    serve(app, listener, verbose=args.verbose, on_ready=ready)
    return 0
