"""Built-in live findings: heavy tails with the preemptions beside them, and drops.

These read only the snapshot window (no database, no event scan), so they
run every second. They correlate by time window only; ``gpuscope explain``
does the per-call overlap attribution. The explain rules plug in through
the same ``FindingSource`` protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from gpuscope.model.ops import Source
from gpuscope.model.units import fmt_ns
from gpuscope.tui.snapshot import FLAG_TAIL, LiveWindow, Preemptions

MAX_TAIL_LINES = 3


def read_comm(pid: int) -> str | None:
    """The command name of a process, or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


class TailLatencyFindings:
    """Flag ops with p99 >= 10x p50 and name the processes that preempted traced threads meanwhile.

    comm_of: pid -> command name (tests pass a dict's ``get``).
    """

    def __init__(self, comm_of: Callable[[int], str | None] = read_comm) -> None:
        self.comm_of = comm_of
        self._comms: dict[int, str | None] = {}

    def _comm(self, pid: int) -> str | None:
        if pid not in self._comms:
            if len(self._comms) > 4096:
                self._comms.clear()
            self._comms[pid] = self.comm_of(pid)
        return self._comms[pid]

    def _preemption_text(self, pre: Preemptions) -> str:
        text = f"{pre.count:,} preemption{'s' if pre.count != 1 else ''}"
        if pre.culprits:
            tgid, n = pre.culprits[0]
            who = self._comm(tgid) if tgid else "the idle task"
            by = f"`{who}` (pid {tgid})" if who and tgid else (who or f"pid {tgid}")
            text += f" by {by}" if n == pre.count else f", {n:,} by {by}"
        return text + f", avg {fmt_ns(pre.avg_off_cpu_ns)} off-CPU"

    def findings(self, window: LiveWindow) -> Sequence[str]:
        tails = [r for r in window.rows if FLAG_TAIL in r.flags and r.layer is not Source.HOST]
        tails.sort(key=lambda r: -(r.p99_ns / r.p50_ns if r.p50_ns else 0.0))
        pre = window.preemptions
        lines: list[str] = []
        for row in tails[:MAX_TAIL_LINES]:
            line = f"{row.name} p99 = {fmt_ns(row.p99_ns)} ({row.p99_ns / row.p50_ns:.0f}× p50 {fmt_ns(row.p50_ns)})"
            if pre.count:
                line += " — " + self._preemption_text(pre)
            lines.append(line)
        if not lines and pre.count:
            lines.append(f"traced threads: {self._preemption_text(pre)} in the last {window.window_s:.0f} s")
        return lines


class DropFindings:
    """Say so when the ring buffer lost events in the last interval, with the remedy."""

    def findings(self, window: LiveWindow) -> Sequence[str]:
        if not window.dropped_in_interval:
            return []
        return [
            f"{window.dropped_in_interval:,} events dropped in the last second (ring buffer full): "
            "use a larger --ring-size or --entry-only"
        ]


def builtin_findings() -> list[TailLatencyFindings | DropFindings]:
    return [DropFindings(), TailLatencyFindings()]
