# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""incident on a real GPU: matmul steps; CPU hogs land on the trainer's core for the middle of the run."""

import os
import time

from _common import cpu_hogs, matrices, scale, step

os.sched_setaffinity(0, {0})
a, b = matrices()
total = 11.0 * scale()
end = time.monotonic() + total
storm_at, storm_for = time.monotonic() + 0.27 * total, 0.45 * total
hogs = None
while time.monotonic() < end:
    if hogs is None and time.monotonic() >= storm_at:
        hogs = cpu_hogs(max(os.cpu_count() or 2, 7), storm_for)
    step(a, b)
