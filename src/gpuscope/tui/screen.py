"""The full-screen live view on a terminal (rich), apart from the plain and JSON views so that they never import rich.

``render_screen`` is a pure function of a snapshot and a height, which is
what the snapshot tests pin down.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpuscope.model.ops import Source
from gpuscope.model.units import fmt_bytes, fmt_ns
from gpuscope.platform.system import SystemStats
from gpuscope.tui.live_snapshot import LiveSnapshot, OpRow, layer_title
from gpuscope.tui.view import fmt_elapsed, fmt_rate

BAR_CELLS = 10
MAX_LIBRARY_LINES = 3
# Below these console widths the p95, then the Max column is left out.
NARROW_WIDTH = 100
NARROWER_WIDTH = 90
_EMPTY = "—"
# The traced command's stderr lines the screen shows while it holds the terminal (the rest follows it).
COMMAND_LINES = 5


def _line(*parts: str | tuple[str, str]) -> Text:
    """One screen line that never wraps (cut with … instead)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for part in parts:
        if isinstance(part, tuple):
            text.append(part[0], style=part[1])
        else:
            text.append(part)
    return text


def _bar(label: str, pct: float | None) -> list[str | tuple[str, str]]:
    if pct is None:
        return [(label, "bold"), " [", (" " * BAR_CELLS, "dim"), "]   …"]
    filled = max(0, min(BAR_CELLS, round(pct / 100 * BAR_CELLS)))
    style = "red" if pct >= 90 else "yellow" if pct >= 70 else "green"
    return [(label, "bold"), " [", ("█" * filled, style), ("░" * (BAR_CELLS - filled), "dim"), f"] {pct:3.0f}%"]


def render_system(s: SystemStats) -> Text:
    return _line(
        ("System  ", "bold cyan"),
        *_bar("CPU", s.cpu_pct),
        f" of {s.cpus} · " if s.cpus else " · ",
        *_bar("Mem", s.mem_pct),
        f", {fmt_bytes(s.mem_available_bytes)} free · ",
        ("Load", "bold"),
        f" {s.load1:.2f} · ",
        ("Swap", "bold"),
        f" {fmt_bytes(s.swap_used_bytes)}",
    )


def render_header(snap: LiveSnapshot) -> RenderableType:
    h = snap.header
    title = _line(("gpuscope trace", "bold"), (f" · {fmt_elapsed(snap.elapsed_s)}", "bold"))
    if h.targets:
        title.append(f" · {h.targets}")
    counts = _line(
        f"  {snap.events:,} events · {fmt_rate(snap.events_per_s)}/s · ",
        (f"{snap.dropped:,} dropped", "bold red" if snap.dropped else ""),
        f" · {snap.processes:,} process{'es' if snap.processes != 1 else ''}",
        f" · db {h.db_path}" if h.db_path else "",
    )
    libs = h.libraries[:MAX_LIBRARY_LINES]
    rows = [(f"{lib.kind} {lib.version or '?'}", f"{lib.probes} probes", lib.path) for lib in libs]
    if len(h.libraries) > len(libs):
        rows.append(("…", "", f"{len(h.libraries) - len(libs)} more libraries"))
    if not h.libraries:
        rows.append(("cuda", "0 probes", "no CUDA library attached yet"))
    names = " ".join(tp.replace("sched_process_", "process_") for tp in h.host_tracepoints) or "off"
    mode = f" · {h.probe_mode}" if h.probe_mode else ""
    rows.append(("host", f"{len(h.host_tracepoints)} tracepoints", names + mode))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    lines = [_line(f"  {a:<{w0}}  {b:>{w1}}  ", (c, "dim")) for a, b, c in rows]
    sampling = snap.sampling_line()
    if sampling:
        lines.append(_line(f"  {sampling}"))
    return Group(title, counts, *lines)


def header_height(snap: LiveSnapshot) -> int:
    libs = len(snap.header.libraries)
    extra = 1 if snap.sampling_line() else 0
    return 3 + extra + max(min(libs, MAX_LIBRARY_LINES), 1) + (1 if libs > MAX_LIBRARY_LINES else 0)


def _columns(width: int | None) -> list[str]:
    cols = ["Op", "Count", "Rate/s", "p50", "p95", "p99", "Max", "Time", "Flags"]
    if width is not None and width < NARROW_WIDTH:
        cols.remove("p95")
    if width is not None and width < NARROWER_WIDTH:
        cols.remove("Max")
    return cols


def _cells(r: OpRow, width: int | None) -> list[str]:
    quiet = r.window_count == 0
    lat = {
        name: fmt_ns(v) if not quiet and v else _EMPTY
        for name, v in (("p50", r.p50_ns), ("p95", r.p95_ns), ("p99", r.p99_ns), ("Max", r.max_ns))
    }
    if r.layer is Source.HOST:
        share, flags = "", r.note
    else:
        share = f"{r.time_share:.0%}" if r.time_share is not None and not quiet else _EMPTY
        flags = "⚠ " + " ".join(r.flags) if r.flags else ""
    by_col = {
        "Op": r.name,
        "Count": f"≈{r.count:,}" if r.estimated else f"{r.count:,}",
        "Rate/s": fmt_rate(r.rate_per_s),
        **lat,
        "Time": share,
        "Flags": flags,
    }
    return [by_col[c] for c in _columns(width)]


def _widths(snap: LiveSnapshot, width: int | None) -> list[int]:
    """Column widths from the content of every layer, so that all tables line up."""
    cols = _columns(width)
    widths = [len(c) for c in cols]
    widths[0] = max(widths[0], len("Event"))
    widths[-1] = max(widths[-1], len("Detail"))
    for r in snap.rows:
        for i, cell in enumerate(_cells(r, width)):
            widths[i] = max(widths[i], len(cell))
    return widths


def render_layer(
    snap: LiveSnapshot, layer: Source, max_rows: int | None = None, width: int | None = None
) -> RenderableType:
    rows = snap.layer(layer)
    host = layer is Source.HOST
    title = f"{layer_title(layer)} · {snap.header.probes(layer)} {'tracepoints' if host else 'probes'}"
    if not rows:
        return _line((f"{title} · no events yet", "dim"))
    shown = rows if max_rows is None else rows[:max_rows]
    table = Table(
        title=Text(f"{title} · {snap.layer_events(layer):,} events", style="bold cyan"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        caption=f"… {len(rows) - len(shown)} more" if len(shown) < len(rows) else None,
        caption_justify="left",
    )
    for name, col_width in zip(_columns(width), _widths(snap, width), strict=True):
        if host and name in ("Op", "Time", "Flags"):
            name = {"Op": "Event", "Time": "", "Flags": "Detail"}[name]
        left = name in ("Op", "Event", "Flags", "Detail")
        table.add_column(name, justify="left" if left else "right", width=col_width, no_wrap=True, overflow="ellipsis")
    for r in shown:
        cells: list[RenderableType] = list(_cells(r, width))
        if r.flags and not host:
            cells[-1] = Text(str(cells[-1]), style="bold yellow")
        table.add_row(*cells, style="dim" if r.window_count == 0 else None)
    return table


def _findings_lines(snap: LiveSnapshot, width: int | None) -> int:
    if not snap.findings:
        return 1
    usable = max((width or 10_000) - 4, 20)
    return 1 + sum(-(-len(f) // usable) for f in snap.findings)


def render_findings(snap: LiveSnapshot) -> RenderableType:
    if not snap.findings:
        return _line((f"No live findings in the last {snap.window_s:.0f} s.", "dim"))
    grid = Table.grid(padding=(0, 1), pad_edge=False)
    grid.add_column(no_wrap=True, style="bold yellow")
    grid.add_column(overflow="fold")
    for line in snap.findings:
        grid.add_row(" ⚠", line)
    return Group(_line(("Findings", "bold")), grid)


def rows_per_layer(snap: LiveSnapshot, height: int | None, width: int | None = None, reserved: int = 0) -> int | None:
    """The largest per-table row count that lets the whole screen fit ``height`` lines (None: no cut).

    ``reserved``: lines kept for other sections (the command's stderr).
    """
    if height is None:
        return None
    layers = snap.layers()
    sizes = [len(snap.layer(layer)) for layer in layers]
    # header, system bar, blank; per layer: title, column header, rule, blank
    # (an empty layer: one line and a blank); findings; footer.
    fixed = header_height(snap) + 2 + sum(4 if n else 2 for n in sizes) + _findings_lines(snap, width) + 1 + reserved
    budget = height - fixed
    if sum(sizes) <= budget:
        return None
    limit = max(sizes)
    # Each cut table also needs its "… N more" line.
    while limit > 1 and sum(min(n, limit) + (n > limit) for n in sizes) > budget:
        limit -= 1
    return limit


def render_screen(
    snap: LiveSnapshot, height: int | None = None, width: int | None = None, command_lines: Sequence[str] = ()
) -> RenderableType:
    """The whole live screen for one snapshot, cut to ``height`` lines and laid out for ``width``.

    ``command_lines``: the last lines of the traced command's stderr, shown under the findings.
    """
    reserved = len(command_lines) + 2 if command_lines else 0
    limit = rows_per_layer(snap, height, width, reserved)
    parts: list[RenderableType] = [render_header(snap), render_system(snap.system), Text("")]
    for layer in snap.layers():
        parts.append(render_layer(snap, layer, limit, width))
        parts.append(Text(""))
    parts.append(render_findings(snap))
    if command_lines:
        parts.append(Text(""))
        parts.append(
            _line(("The command's stderr", "bold"), ("  last lines; all of it follows when this view closes", "dim"))
        )
        parts.extend(Text(line, no_wrap=True, overflow="ellipsis") for line in command_lines)
    parts.append(
        _line(
            (
                f"count since start · rate last second · percentiles and time last {snap.window_s:.0f} s"
                " · Ctrl-C stops and summarizes",
                "dim",
            )
        )
    )
    return Group(*parts)


class LiveView:
    """Full-screen view on a terminal (rich ``Live`` on the alternate screen)."""

    def __init__(self, console: Console | None = None, command_tail: Callable[[int], list[str]] | None = None) -> None:
        self.console = console or Console()
        self._tail = command_tail
        self._live: Live | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> LiveView:
        self._live = Live(
            Text("gpuscope trace: starting… (Ctrl-C ends)", style="dim"),
            console=self.console,
            screen=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start(refresh=True)
        return self

    def post(self, snap: LiveSnapshot) -> None:
        with self._lock:
            if self._live is not None:
                width, height = self._terminal_size()
                lines = self._tail(COMMAND_LINES) if self._tail is not None else []
                self._live.update(render_screen(snap, height, width, lines), refresh=True)

    def _terminal_size(self) -> tuple[int, int]:
        """The terminal's size now (it follows resizes; stale COLUMNS/LINES variables are ignored)."""
        try:
            size = os.get_terminal_size(self.console.file.fileno())
        except (OSError, ValueError, AttributeError):
            return self.console.size.width, self.console.size.height
        self.console.size = (size.columns, size.lines)
        return size.columns, size.lines

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None
