"""Thread lanes for the dashboard's timeline: what each thread that calls CUDA did, reduced to pixels.

For each thread (the busiest first), for each of ``width`` equal intervals of
the window: the share of it the thread spent inside GPU calls (runtime,
driver, NCCL), preempted (runnable while another task had its CPU), and off
its CPU by its own choice (a sleep, a wait, I/O). The server sends these
fractions, never the events: a lane of a million calls is ``width`` numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.frame import GPU_CALLS, EventFrame
from gpuscope.analysis.intervals import distinct, merge, overlap_ns
from gpuscope.model.ops import Op

SCHED = int(Op.sched_switch)
MAX_WIDTH = 2_000
MAX_LANES = 32


@dataclass(frozen=True, slots=True)
class Lane:
    """One thread's shares of each pixel interval (each in [0, 1]), and its time in GPU calls in all."""

    pid: int
    tid: int
    comm: str | None
    gpu: np.ndarray
    preempted: np.ndarray
    blocked: np.ndarray
    gpu_ns: int

    def as_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "tid": self.tid,
            "comm": self.comm,
            "gpu_ns": self.gpu_ns,
            "gpu": np.round(self.gpu, 3).tolist(),
            "preempted": np.round(self.preempted, 3).tolist(),
            "blocked": np.round(self.blocked, 3).tolist(),
        }


def thread_lanes(frame: EventFrame, start_ns: int, end_ns: int, width: int, max_lanes: int = MAX_LANES) -> list[Lane]:
    """The lanes of the threads that made GPU calls in [start_ns, end_ns), busiest first (see the module)."""
    width = max(1, min(width, MAX_WIDTH))
    end_ns = max(end_ns, start_ns + width)
    edges = start_ns + (np.arange(width + 1, dtype=np.int64) * (end_ns - start_ns)) // width
    q_start, q_end = edges[:-1], edges[1:]
    size = np.maximum(q_end - q_start, 1).astype(np.float64)
    f = frame
    calls = np.flatnonzero(np.isin(f.op, np.fromiter(GPU_CALLS, dtype=np.int64)))
    sched = np.flatnonzero(f.op == SCHED)
    keys = (f.pid[calls].astype(np.int64) << 32) | f.tid[calls].astype(np.int64)
    lanes = []
    for key in distinct(keys).tolist():
        pid, tid = key >> 32, key & 0xFFFFFFFF
        mine = calls[keys == key]
        gs, ge = merge(f.ts[mine], f.ts[mine] + f.dur[mine])
        off = sched[(f.pid[sched] == pid) & (f.tid[sched] == tid)]
        pre = off[f.arg0[off] != 0]
        vol = off[f.arg0[off] == 0]
        ps, pe = merge(f.ts[pre], f.ts[pre] + f.dur[pre])
        vs, ve = merge(f.ts[vol], f.ts[vol] + f.dur[vol])
        gpu = overlap_ns(q_start, q_end, gs, ge)
        lanes.append(
            Lane(
                pid,
                tid,
                f.comm(pid),
                np.minimum(gpu / size, 1.0),
                np.minimum(overlap_ns(q_start, q_end, ps, pe) / size, 1.0),
                np.minimum(overlap_ns(q_start, q_end, vs, ve) / size, 1.0),
                int(gpu.sum()),
            )
        )
    lanes.sort(key=lambda lane: (-lane.gpu_ns, lane.pid, lane.tid))
    return lanes[:max_lanes]
