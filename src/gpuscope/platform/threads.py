"""Thread priorities: work that can wait yields the CPU to the traced program.

On a small machine the agent's threads share CPUs with the workload it
traces. Live analysis can wait, so it runs at a lower priority and the
scheduler gives the CPU to the workload first. Not the writer: a writer
descheduled while it holds SQLite's locks (a checkpoint) makes other
readers of the recording fail with "database is locked". Linux keeps a nice
value per thread.
"""

from __future__ import annotations

import os
import threading


def lower_thread_priority(nice: int) -> bool:
    """Raise the calling thread's nice value by ``nice``; False when the system refuses (never raises)."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError:
        return False
    return True
