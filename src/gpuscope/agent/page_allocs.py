"""Page allocations as events: the kernel counts them per process (a probe per page would cost too much),
and each interval's counts become one mm_page_alloc row per process."""

from __future__ import annotations

import numpy as np

from gpuscope.agent.procinfo import read_process
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op


def page_alloc_events(counts: dict[int, tuple[int, int]], start_ns: int, end_ns: int) -> np.ndarray:
    """One mm_page_alloc event per process over [start_ns, end_ns]: its pages (``arg0``) and bytes."""
    ev = np.zeros(len(counts), dtype=EVENT_DTYPE)
    for i, (pid, (n, nbytes)) in enumerate(sorted(counts.items())):
        ev[i]["pid"] = ev[i]["tid"] = pid
        ev[i]["bytes"] = nbytes
        ev[i]["arg0"] = n
    ev["ts_ns"] = start_ns
    ev["duration_ns"] = end_ns - start_ns
    ev["op"] = int(Op.mm_page_alloc)
    ev["comm"] = [_comm_of(int(p)).encode()[:15] for p in ev["pid"]]
    return ev


def _comm_of(pid: int) -> str:
    if pid == 0:
        return "(other)"
    info = read_process(pid)
    return info.comm if info else ""
