"""Render ``LiveSnapshot`` values: one line or one JSON object per interval (the full screen is ``tui.screen``).

Views are pure consumers: ``post(snapshot)`` is all they receive, from the
snapshot builder's thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import IO

from gpuscope.model.ops import Source
from gpuscope.model.units import fmt_ns
from gpuscope.tui.live_snapshot import LiveSnapshot


def fmt_elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def fmt_rate(per_s: float) -> str:
    if per_s >= 100:
        return f"{per_s:,.0f}"
    if per_s > 0:
        return f"{per_s:.1f}"
    return "0"


def plain_line(snap: LiveSnapshot) -> str:
    """One line per interval for logs and CI."""
    s = snap.system
    cpu = f"{s.cpu_pct:.0f}%" if s.cpu_pct is not None else "?"
    line = (
        f"[{snap.elapsed_s:5.0f}s] {snap.events:,} events ({snap.events_per_s:,.0f}/s), {snap.dropped:,} dropped"
        f" | cpu {cpu} mem {s.mem_pct:.0f}% load {s.load1:.2f}"
    )
    timed = [r for r in snap.rows if r.layer is not Source.HOST and r.window_count]
    if timed:
        top = max(timed, key=lambda r: (r.time_share or 0.0, r.count))
        approx = "≈" if top.estimated else ""
        line += f" | top {top.name} {approx}{fmt_rate(top.rate_per_s)}/s p99 {fmt_ns(top.p99_ns)}"
    if snap.self_costs:
        pid, share = max(snap.self_costs, key=lambda c: c[1])
        budget = f"/{snap.budget:.0%}" if snap.budget else ""
        line += f" | gpuscope {share:.1%}{budget} of pid {pid}"
    flagged = [f"{r.name} {'+'.join(r.flags)}" for r in snap.rows if r.flags]
    if flagged:
        line += " | ⚠ " + ", ".join(flagged)
    return line


class PlainView:
    """One summary line per ``every`` intervals (0: none); a finding is printed when it first appears.

    A service's log (journald, a container's) wants a line a minute, not a second: ``trace --status-every``.
    """

    def __init__(self, stream: IO[str], every: int = 1) -> None:
        self.stream = stream
        self.every = every
        self._posts = 0
        self._seen: set[str] = set()

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def post(self, snap: LiveSnapshot) -> None:
        if self.stream.closed:
            return
        self._posts += 1
        out = [plain_line(snap)] if self.every and self._posts % self.every == 0 else []
        keys = set()
        for finding in snap.findings:
            key = finding.split(" ", 1)[0]
            keys.add(key)
            if key not in self._seen:
                out.append(f"  ⚠ {finding}")
        self._seen = keys
        if out:
            _write_or_close(self.stream, "\n".join(out) + "\n")


class JsonView:
    """One JSON object per interval, one per line (machine format: nothing else on its stream)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __enter__(self) -> JsonView:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def post(self, snap: LiveSnapshot) -> None:
        self.emit(snap.to_dict())

    def emit(self, obj: dict[str, object]) -> None:
        if not self.stream.closed:
            _write_or_close(self.stream, json.dumps(obj, ensure_ascii=False, sort_keys=False) + "\n")


def _write_or_close(stream: IO[str], text: str) -> None:
    """Write and flush; when the reader has gone (a closed pipe, a full disk), stop writing to ``stream`` for good.

    The live output is a view of the recording, not the recording: losing its
    reader must not stop tracing, and never touches the traced command.
    """
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):
            if stream in (sys.stdout, sys.stderr):
                # Not closed: later messages (and the interpreter's last flush) are discarded instead of failing.
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            else:
                stream.close()
