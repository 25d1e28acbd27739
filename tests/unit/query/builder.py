"""A small recording for the query surface and the commands: one session of steady calls."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op
from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionCounts, SessionInfo, close_session, create_session
from gpuscope.store.writer import EventWriter

WALL0 = 1_700_000_000_000_000_000
MONO0 = 1_000


def build_db(
    path: Path,
    n: int = 1000,
    pids: tuple[int, ...] = (42,),
    first_call_ns: int = 0,
    *,
    closed: bool = True,
    agent_pid: int | None = None,
) -> Path:
    """One session; per pid, n cudaMalloc + n cudaStreamSynchronize calls, one every ms from ``first_call_ns``.

    ``first_call_ns`` counts from the session's start (a trace attaches before the first call).
    ``closed``: the session is closed after its last call, as a trace that stopped; else left as
    a killed agent leaves it. ``agent_pid``: the tracer the session names.
    """
    conn = connect_writer(path)
    info = SessionInfo("u-1", "node-a", "host", "6.18", "0.1", "1.1", WALL0, MONO0, ["x"], {}, agent_pid=agent_pid)
    sid = create_session(conn, info)
    w = EventWriter(conn, sid)
    for pid in pids:
        for op in (Op.cudaMalloc, Op.cudaStreamSynchronize):
            ev = np.zeros(n, dtype=EVENT_DTYPE)
            ev["ts_ns"] = MONO0 + first_call_ns + np.arange(n) * 1_000_000
            ev["duration_ns"] = 500
            ev["pid"], ev["tid"], ev["op"] = pid, pid + 1, int(op)
            ev["comm"] = b"train.py"
            w.put(ev)
    w.close()
    if closed:
        end = first_call_ns + n * 1_000_000
        counts = SessionCounts(2 * n * len(pids), 0, {"dropped": 0}, pids, ())
        close_session(conn, sid, counts, stopped_wall_ns=WALL0 + end, stopped_mono_ns=MONO0 + end)
        conn.commit()
    conn.close()
    return path
