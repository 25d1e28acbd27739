"""Built-in live findings: heavy tails with the preemptions beside them, and drops.

These read only the snapshot window (no database, no event scan), so they
run every second. They correlate by time window only; ``gpuscope explain``
does the per-call overlap attribution. The explain rules plug in through
the same ``FindingSource`` protocol.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpuscope.agent.nccl_progress import NcclHang, NcclProgress, RankRef
from gpuscope.model.drops import drop_advice
from gpuscope.model.nccl_hang_text import in_flight_summary, rank_name, returned_late_summary
from gpuscope.model.ops import Source, op_name
from gpuscope.model.units import fmt_ns
from gpuscope.tui.live_snapshot import FLAG_TAIL, LiveWindow, Preemptions

MAX_TAIL_LINES = 3


def read_comm(pid: int) -> str | None:
    """The command name of a process, or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


class TailLatencyFindings:
    """Flag ops with p99 >= 10x p50 and name the processes that preempted traced threads meanwhile.

    comm_of: pid -> command name (tests pass a dict's ``get``). agent_pid: the
    tracer's own process; its preemptions are its measured overhead, named
    as such, never a culprit to move away.
    """

    def __init__(self, comm_of: Callable[[int], str | None] = read_comm, agent_pid: int | None = None) -> None:
        self.comm_of = comm_of
        self.agent_pid = os.getpid() if agent_pid is None else agent_pid
        self._comms: dict[int, str | None] = {}

    def _comm(self, pid: int) -> str | None:
        if pid not in self._comms:
            if len(self._comms) > 4096:
                self._comms.clear()
            self._comms[pid] = self.comm_of(pid)
        return self._comms[pid]

    def _preemption_text(self, pre: Preemptions) -> str:
        text = f"{pre.count:,} preemption{'s' if pre.count != 1 else ''}"
        culprits = [c for c in pre.culprits if c[0] != self.agent_pid]
        own = sum(n for tgid, n in pre.culprits if tgid == self.agent_pid)
        if culprits:
            tgid, n = culprits[0]
            who = self._comm(tgid) if tgid else "the idle task"
            by = f"`{who}` (pid {tgid})" if who and tgid else (who or f"pid {tgid}")
            text += f" by {by}" if n == pre.count else f", {n:,} by {by}"
        if own:
            text += f" ({own:,} by gpuscope itself: tracer overhead)"
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
    """Say so when the ring buffer lost events in the last interval, with the remedy measured to help.

    flags: the session's options (``ring_bytes`` chooses the advice; see ``gpuscope.model.drops``).
    """

    def __init__(self, flags: Mapping[str, object] | None = None) -> None:
        self.flags = flags or {}

    def findings(self, window: LiveWindow) -> Sequence[str]:
        if not window.dropped_in_interval:
            return []
        return [
            f"{window.dropped_in_interval:,} events dropped in the last second (ring buffer full; counts are "
            f"lower bounds): {drop_advice(self.flags)}"
        ]


HANG_KIND = "nccl-hang"  # the explain rule's kind: the same finding, found by the agent while the job runs


def _who(r: RankRef) -> str:
    return rank_name(r.pid, r.rank, r.comm)


def hang_line(h: NcclHang) -> str:
    """One hang in the words of explain's nccl-hang finding."""
    if h.late_op is not None:
        summary = returned_late_summary(_who(h.who), op_name(h.late_op), h.silence_ns)
    else:
        stuck = op_name(h.stuck_op) if h.stuck_op is not None else None
        summary = in_flight_summary(_who(h.who), h.silence_ns, h.exited, stuck, [(_who(p), n) for p, n in h.ahead])
    return f"CRITICAL {HANG_KIND}: {summary}"


class NcclHangFindings:
    """NCCL ranks hung now, found by the agent from the rows it reads (``gpuscope.agent.nccl_progress``).

    clock_ns: CLOCK_MONOTONIC ns, the events' clock (tests pass a frozen one).
    """

    def __init__(
        self,
        progress: NcclProgress,
        threshold_ns: int,
        clock_ns: Callable[[], int] = lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC),
    ) -> None:
        self.progress = progress
        self.threshold_ns = threshold_ns
        self.clock_ns = clock_ns

    def findings(self, window: LiveWindow) -> Sequence[str]:
        return [hang_line(h) for h in self.progress.hangs(self.clock_ns(), self.threshold_ns)]

    def finding_counts(self) -> dict[tuple[str, str], int]:
        """Hangs now by (kind, severity), as the metrics exporter's gauge reads findings."""
        n = len(self.progress.hangs(self.clock_ns(), self.threshold_ns))
        return {(HANG_KIND, "CRITICAL"): n} if n else {}


def builtin_findings(flags: Mapping[str, object] | None = None) -> list[TailLatencyFindings | DropFindings]:
    return [DropFindings(flags), TailLatencyFindings()]
