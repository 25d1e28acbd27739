"""The tracer's own CPU time: measured overhead of recording, never a cause to report or a process to move.

The agent runs beside the workload and takes CPU from traced threads now and
then; the scheduler records that as preemption like any other. The rules
leave the tracer out of their causes (``Context.preempting``); this module
measures what it took instead, so a report can say what tracing cost.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.frame import process_names
from gpuscope.store.sessions_read import session_states

# The agent's command name: what ``gpuscope trace`` runs as (the console script's name).
TRACER_COMM = "gpuscope"


@dataclass(frozen=True, slots=True)
class TracerIdentity:
    """The recording agents' pids, and how they were found: "sessions" (recorded), "comm" (by name), or None."""

    pids: frozenset[int] = frozenset()
    found_by: str | None = None


NO_TRACER = TracerIdentity()


def identify_tracer(conn: sqlite3.Connection) -> TracerIdentity:
    """Read the pids of the agents that made the recording.

    Each session records its agent's pid (``sessions.agent_pid``). Files that
    predate it fall back to the processes named like gpuscope's own command
    (the agent names itself when it preempts a traced thread); that fallback
    misses an agent started as ``python -m gpuscope`` (named after the
    interpreter), which is then reported like any other preemptor.
    """
    states = session_states(conn)
    pids = {s.agent_pid for s in states if s.agent_pid is not None}
    if states and all(s.agent_pid is not None for s in states):
        return TracerIdentity(frozenset(pids), "sessions")
    comms, _ = process_names(conn)
    by_name = {pid for pid, comm in comms.items() if comm == TRACER_COMM}
    found = pids | by_name
    if not found:
        return NO_TRACER
    return TracerIdentity(frozenset(found), "comm" if not pids else "sessions and comm")


@dataclass(frozen=True, slots=True)
class TracerOverhead:
    """How long the tracer kept traced threads off their CPU in the window, against all their preemption.

    ``preempted_ns`` / ``traced_preempted_ns``: the tracer's share of the
    time traced threads were runnable but off CPU; ``in_calls_ns`` /
    ``calls_preempted_ns``: the same inside CUDA calls.
    """

    tracer: TracerIdentity
    preempted_ns: int = 0
    traced_preempted_ns: int = 0
    in_calls_ns: int = 0
    calls_preempted_ns: int = 0

    @property
    def share(self) -> float:
        return self.preempted_ns / self.traced_preempted_ns if self.traced_preempted_ns else 0.0

    @property
    def in_calls_share(self) -> float:
        return self.in_calls_ns / self.calls_preempted_ns if self.calls_preempted_ns else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "tracer_pids": sorted(self.tracer.pids),
            "tracer_pids_from": self.tracer.found_by,
            "preempted_ns": self.preempted_ns,
            "traced_preempted_ns": self.traced_preempted_ns,
            "share": round(self.share, 4),
            "in_calls_ns": self.in_calls_ns,
            "calls_preempted_ns": self.calls_preempted_ns,
            "in_calls_share": round(self.in_calls_share, 4),
        }


def measure_overhead(ctx: Context, tracer: TracerIdentity) -> TracerOverhead:
    """Measure the tracer's preemption of the traced threads (of the ``--pid`` processes) in the window."""
    f, w = ctx.frame, ctx.window
    rows = np.concatenate([ctx.preempting, ctx.tracer_preempting])
    if ctx.pid_filter:
        rows = rows[np.isin(f.pid[rows], np.array(ctx.pid_filter, dtype=np.int64))]
    inside = np.clip(np.minimum(f.ts[rows] + f.dur[rows], w.end_ns) - np.maximum(f.ts[rows], w.start_ns), 0, None)
    own = np.isin(rows, ctx.tracer_preempting)
    in_calls = int(ctx.tracer_preempted_ns.sum())  # ``ctx.calls`` are the --pid processes' already
    return TracerOverhead(
        tracer,
        preempted_ns=int(inside[own].sum()),
        traced_preempted_ns=int(inside.sum()),
        in_calls_ns=in_calls,
        calls_preempted_ns=in_calls + int(ctx.preempted_ns.sum()),
    )
