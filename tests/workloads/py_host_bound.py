"""A training loop starved by its own host: each step builds its batch in pure Python, then feeds the GPU.

``py_host_bound.py LIBCUDART SECONDS`` runs steps for about SECONDS: ~0.2 s in
``build_batch`` (per-sample Python work, as a Dataset's ``__getitem__`` does),
~0.05 s in ``collate``, then 40 launches and a synchronisation. Prints one JSON
line: {"pid", "steps"}.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time


def build_batch(n: int) -> list[int]:
    out = []
    for i in range(n):
        out.append((i * i) % 7)
    return out


def collate(batch: list[int]) -> int:
    return sum(x for x in batch[: len(batch) // 4])


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    end = time.monotonic() + float(sys.argv[2])
    steps = 0
    while time.monotonic() < end:
        batch = build_batch(int(os.environ.get("BATCH", "3000000")))
        collate(batch)
        for _ in range(40):
            lib.cudaLaunchKernel(None, 0, 0, None, 0, None)
        lib.cudaDeviceSynchronize()
        steps += 1
    print(json.dumps({"pid": os.getpid(), "steps": steps}))


if __name__ == "__main__":
    main()
