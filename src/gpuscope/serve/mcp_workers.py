"""The blocking work behind the MCP tools that do more than one API read: query_fleet, diff and run_demo.

Each runs on a worker thread (``gpuscope.serve.mcp_server``'s ``_call``);
the arguments a user gets wrong are ``ToolError``s with a one-line reason.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from gpuscope.model.session_choice import EVERY_SESSION
from gpuscope.serve.mcp_answers import compact_finding


def query_fleet(sql: str, limit: int) -> Any:
    from gpuscope.fleet.client import configured_client
    from gpuscope.fleet.gather import AllNodesFailedError, gather_rows

    client = configured_client(timeout_s=6.0)
    try:
        return gather_rows(client.post("/api/v1/query", {"sql": sql, "limit": limit}))
    except AllNodesFailedError as exc:
        raise ToolError(str(exc)) from None


def beside(db: Path, other: str) -> str:
    """``other`` when it names a file in ``db``'s folder (after links and ``..``); a ToolError otherwise.

    A network client may compare recordings the server holds beside the one it
    serves, not open any file the server's user can read.
    """
    folder = db.resolve().parent
    try:
        path = (folder / other).resolve()
    except (OSError, RuntimeError, ValueError):  # a link loop, a NUL
        path = None
    if path is None or path.parent != folder:
        raise ToolError(f"other: over HTTP, only a recording in the served recording's folder ({folder.name}/)")
    return str(path)


def diff(db: Path, other: str | None, a: tuple[str | None, str | None], b: tuple[str | None, str | None]) -> Any:
    from gpuscope.diff import diff_databases, diff_windows
    from gpuscope.query.filters import EventFilter

    if other is not None:
        if any(a) or any(b):
            raise ToolError("give either other (a recording) or the two windows, not both")
        if not other or "\x00" in other:
            raise ToolError("other: the path of a recording (not empty, no NUL character)")
        report = diff_databases(db, other)
    elif any(a) and any(b):
        # Two windows named by time may lie in any two sessions: offsets count from the recording's start.
        every = EVERY_SESSION
        report = diff_windows(
            db,
            EventFilter.from_options(start=a[0], end=a[1], sessions=every),
            EventFilter.from_options(start=b[0], end=b[1], sessions=every),
        )
    else:
        raise ToolError("give other (a recording's path) or two windows (a_from/a_to and b_from/b_to)")
    return report.as_dict()


def run_demo(scenario: str) -> Any:
    from gpuscope.demo import REGISTRY, DemoMode, DemoRunner

    if scenario not in REGISTRY.names():
        raise ToolError(f"scenario {scenario!r}: one of {', '.join(REGISTRY.names())}")
    with tempfile.TemporaryDirectory(prefix="gpuscope-mcp-demo-") as scratch:
        # Not as a context manager: that installs signal handlers, which only the main thread may do.
        runner = DemoRunner(Path(scratch) / "demo.db")
        try:
            result = runner.run(REGISTRY.get(scenario), DemoMode.SYNTHETIC)
        finally:
            runner.close()
        d: dict[str, Any] = result.report.as_dict()
    return {
        "scenario": scenario,
        "expected": result.scenario.expected_kind,
        "events": result.events,
        "findings": [compact_finding(f) for f in d["findings"]],
    }
