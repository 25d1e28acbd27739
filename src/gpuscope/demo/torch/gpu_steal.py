# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""gpu-steal on a real GPU: job-a alone, then two more processes run matmuls on the same GPU."""

import multiprocessing as mp
import time

from _common import matrices, scale, step


def job(seconds: float) -> None:
    a, b = matrices()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step(a, b)


if __name__ == "__main__":
    mp.set_start_method("spawn")
    total = 8.0 * scale()
    others = []
    a = mp.Process(target=job, args=(total,))
    a.start()
    time.sleep(0.33 * total)
    for seconds in (0.6 * total, 0.45 * total):
        p = mp.Process(target=job, args=(seconds,))
        p.start()
        others.append(p)
        time.sleep(0.1 * total)
    for p in (a, *others):
        p.join()
