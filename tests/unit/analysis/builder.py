"""Build small event sets for rule tests: in memory (EventFrame) or as a real database."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuscope.analysis.attribution import EMPTY, Attribution
from gpuscope.analysis.context import Context
from gpuscope.analysis.engine import Report, analyse
from gpuscope.analysis.frame import EventFrame, Window
from gpuscope.model.ops import Op
from gpuscope.store.aggregates import insert_drops
from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionCounts, close_session, mark_committed

MS = 1_000_000
US = 1_000
S = 1_000_000_000
WALL0 = 1_700_000_000_000_000_000  # the wall-clock start of ``to_db``'s session (its monotonic start is 0)


@dataclass
class Events:
    rows: list[tuple[int, ...]] = field(default_factory=list)
    comms: dict[int, str] = field(default_factory=dict)
    cgroup: int = 7

    def add(
        self,
        op: Op,
        ts: int,
        dur: int = 0,
        pid: int = 100,
        tid: int | None = None,
        *,
        nbytes: int = 0,
        handle: int = 0,
        stream: int = 0,
        arg0: int = 0,
        arg1: int = 0,
        cgroup: int | None = None,
    ) -> None:
        tid = pid if tid is None else tid
        cgroup = self.cgroup if cgroup is None else cgroup
        self.rows.append((ts, dur, pid, tid, int(op), cgroup, nbytes, handle, stream, arg0, arg1))

    def sched(
        self,
        ts: int,
        dur: int,
        *,
        pid: int = 100,
        tid: int | None = None,
        preempted: bool,
        by_pid: int = 999,
        by_cgroup: int | None = None,
    ) -> None:
        """A switch-out of ``pid``'s thread for ``dur`` ns, to ``by_pid`` (of ``by_cgroup``)."""
        self.add(
            Op.sched_switch,
            ts,
            dur,
            pid,
            tid,
            handle=(by_pid << 32) | by_pid,
            stream=self.cgroup if by_cgroup is None else by_cgroup,
            arg0=int(preempted),
            arg1=0 if preempted else 1,
        )

    def loop(self, op: Op, n: int, period: int, dur: int, start: int = 0, pid: int = 100, **kw: int) -> list[int]:
        """n calls, one every period ns; returns their start times."""
        ts = [start + i * period for i in range(n)]
        for t in ts:
            self.add(op, t, dur, pid, **kw)
        return ts

    def frame(self) -> tuple[EventFrame, Window]:
        a = np.array(sorted(self.rows), dtype=np.int64).reshape(-1, 11)
        cols = [np.ascontiguousarray(a[:, j]) for j in range(11)]
        frame = EventFrame.from_columns(cols, dict(self.comms), {})
        lo = int(a[:, 0].min()) if len(a) else 0
        hi = int((a[:, 0] + a[:, 1]).max()) if len(a) else 0
        return frame, Window(lo, hi, lo, hi, 0, (1,), len(a))

    def context(self, attribution: Attribution = EMPTY) -> Context:
        frame, window = self.frame()
        return Context(frame, window, attribution=attribution)

    def report(self) -> Report:
        frame, window = self.frame()
        return analyse(frame, window)

    def kinds(self) -> list[str]:
        return [f.kind for f in self.report().findings]

    def to_db(self, path: Path, *, agent_pid: int | None = None) -> Path:
        """Write the rows as session 1 (left open: ``end_session`` closes it); ``agent_pid``: its tracer."""
        conn = connect_writer(path)
        conn.execute(
            "INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns, agent_pid) VALUES ('t', 'n', ?, 0, ?)",
            (WALL0, agent_pid),
        )
        conn.execute("INSERT INTO comms(id, comm) VALUES (1, 'train')")
        for pid, comm in self.comms.items():
            conn.execute("INSERT INTO processes(session_id, pid, comm, first_seen_ns) VALUES (1, ?, ?, 0)", (pid, comm))
        conn.executemany(
            "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
            "bytes, handle, stream, arg0, arg1) VALUES (1, ?, ?, ?, ?, 1, ?, ?, 0, 0, ?, ?, ?, ?, ?)",
            [(r[0], r[1], r[2], r[3], r[5], r[4], r[6], r[7], r[8], r[9], r[10]) for r in self.rows],
        )
        conn.close()
        return path


def steady_training(ev: Events, n: int = 200, pid: int = 100, start: int = 0, period: int = 10 * MS) -> list[int]:
    """A healthy loop: launch, short sync, every 10 ms; returns the sync start times."""
    syncs = []
    for i in range(n):
        t = start + i * period
        ev.add(Op.cudaLaunchKernel, t, 5 * US, pid, handle=0xAA)
        ev.add(Op.cudaStreamSynchronize, t + 10 * US, 50 * US, pid)
        syncs.append(t + 10 * US)
    return syncs


def slow_syncs(ev: Events, syncs: list[int], every: int, extra: int, **sched: object) -> None:
    """Make every n-th sync ``extra`` longer, with an off-CPU interval of that length inside it
    (``sched``: ``Events.sched``'s keywords: who took the CPU, preempted or not)."""
    for i, t in enumerate(syncs):
        if i % every == 0:
            ev.rows = [
                (r[0], r[1] + extra, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, extra, **sched)  # type: ignore[arg-type]


def end_session(
    path: Path,
    at_ns: int,
    *,
    end_reason: str = "stopped",
    recorded: int = 0,
    drops: dict[str, int] | None = None,
) -> None:
    """Close session 1 at monotonic ``at_ns`` the way an agent does: final counters, stop time, reason.

    ``drops``: the tracer's counters by name (``drop_cuda``, ...); ``dropped`` is set to their event total.
    """
    counters = dict(drops or {})
    dropped = sum(counters.get(k, 0) for k in ("drop_cuda", "drop_driver", "drop_host", "drop_nccl"))
    counters["dropped"] = dropped
    conn = connect_writer(path)
    close_session(
        conn,
        1,
        SessionCounts(recorded, dropped, counters, (), ()),
        stopped_wall_ns=WALL0 + at_ns,
        stopped_mono_ns=at_ns,
        end_reason=end_reason,
    )
    conn.close()


def commit_until(path: Path, at_ns: int) -> None:
    """Say, as a running agent does at each commit, that session 1 is complete up to monotonic ``at_ns``."""
    conn = connect_writer(path)
    mark_committed(conn, 1, WALL0 + at_ns, at_ns)
    conn.close()


def log_drops(path: Path, by_second: dict[int, dict[str, int]]) -> None:
    """Store when session 1 dropped events: {monotonic second (ns): {source: events}}."""
    conn = connect_writer(path)
    for bucket, drops in by_second.items():
        insert_drops(conn, 1, bucket, drops)
    conn.close()
