"""Wire a trace session to its live output: the full-screen view, plain lines or JSON."""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from gpuscope.agent.live_stats import Tick
from gpuscope.agent.session import TraceSession
from gpuscope.tui.live_findings import builtin_findings
from gpuscope.tui.live_snapshot import FindingSource, LiveSnapshot, SnapshotBuilder
from gpuscope.tui.source import SessionSource
from gpuscope.tui.view import JsonView, PlainView

if TYPE_CHECKING:
    from gpuscope.tui.screen import LiveView


class OutputMode(enum.Enum):
    TUI = "tui"  # full screen on the terminal of stderr
    PLAIN = "plain"  # one line per interval on stderr
    JSON = "json"  # one JSON object per interval on its own stream (-o FILE, or stdout without a command)


def choose_mode(*, no_tui: bool, json: bool, terminal: bool, shared: bool = False) -> OutputMode:
    """``--json`` wins; the full screen needs stderr to be a terminal, no ``--no-tui``, and the screen to itself.

    Stderr, not stdout: stdout is the traced command's (``trace -- CMD > out``
    still gets the live view on the terminal). ``shared``: the launched
    command writes to that same terminal. A full screen would hide its output
    (the alternate screen is gone at the end, and what was written there with
    it), so the view is status lines between the command's own.
    """
    if json:
        return OutputMode.JSON
    if no_tui or not terminal or shared:
        return OutputMode.PLAIN
    return OutputMode.TUI


def same_terminal(a: IO[str], b: IO[str]) -> bool:
    """Whether two streams are one terminal (the same device), as a launched command's stdout and our stderr."""
    try:
        if not (a.isatty() and b.isatty()):
            return False
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (sa.st_rdev, sa.st_dev) == (sb.st_rdev, sb.st_dev)


class LiveOutput:
    """Run a snapshot builder and a view around ``session.run``.

    Use as a context manager around the collector loop and pass ``on_tick``
    as the session's tick callback. ``finish(counters)`` posts the last
    interval (plain and JSON modes) once the session has flushed.
    """

    def __init__(
        self,
        session: TraceSession,
        mode: OutputMode,
        targets: str,
        *,
        findings: Sequence[FindingSource] | None = None,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
        status_every: int = 1,
        command_tail: Callable[[int], list[str]] | None = None,
    ) -> None:
        self.mode = mode
        self.source = SessionSource(session, targets)
        out = stdout or sys.stdout
        err = stderr or sys.stderr
        self.view: LiveView | PlainView | JsonView
        if mode is OutputMode.TUI:
            # rich only for the full screen: plain and JSON output (services, CI) start ~40 ms sooner without it.
            from rich.console import Console

            from gpuscope.tui.screen import LiveView

            self.view = LiveView(Console(file=err), command_tail=command_tail)
        elif mode is OutputMode.JSON:
            self.view = JsonView(out)
        else:
            self.view = PlainView(err, status_every)
        self.builder = SnapshotBuilder(
            self.source,
            self._post,
            findings=builtin_findings() if findings is None else findings,
        )
        self.last: LiveSnapshot | None = None

    def _post(self, snap: LiveSnapshot) -> None:
        self.last = snap
        self.view.post(snap)

    def on_tick(self, tick: Tick) -> None:
        self.source.on_tick(tick)

    def __enter__(self) -> LiveOutput:
        self.view.__enter__()
        self.builder.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.builder.stop()
        finally:
            self.view.__exit__(*exc)

    def finish(self, counters: dict[str, int], *, db_path: str, session_id: int) -> None:
        """After the session flushed: the last partial interval, and for JSON an end record."""
        if self.mode is OutputMode.TUI:
            return
        self.source.set_dropped(counters.get("dropped", 0))
        self._post(self.builder.build())
        if isinstance(self.view, JsonView):
            last = self.last
            self.view.emit(
                {
                    "type": "end",
                    "events": last.events if last else 0,
                    "dropped": counters.get("dropped", 0),
                    "db": db_path,
                    "session": session_id,
                }
            )
