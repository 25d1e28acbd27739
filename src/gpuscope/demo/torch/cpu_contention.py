# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""cpu-contention on a real GPU: two bursty neighbours share the trainer's core for most of the run."""

import os
import time

from _common import cpu_hogs, matrices, scale, step

os.sched_setaffinity(0, {0})
a, b = matrices(1024)
total = 8.0 * scale()
end = time.monotonic() + total
hogs = None
while time.monotonic() < end:
    if hogs is None and time.monotonic() >= end - 0.8 * total:
        hogs = cpu_hogs(2, 0.6 * total)
    step(a, b)
