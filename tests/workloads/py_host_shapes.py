"""Host-bound training-loop shapes in real Python, feeding the stand-in libcudart through ctypes.

``py_host_shapes.py SHAPE LIBCUDART SECONDS`` runs steps for about SECONDS and
prints one JSON line: {"pid", "steps", "tids"}.

- ``launch``: 400 tiny kernels a step, each after ~30 µs of Python (``add_bias``),
  then a synchronisation that finds the GPU done.
- ``gil``: the main thread launches and synchronises while a second thread
  (``tokenize``) runs pure Python all the time: the main thread waits for the GIL.
- ``sync``: 20 launches, a synchronisation every step (run with a latency on
  it, as the GPU computing the step), then ~15 ms of Python (``log_metrics``)
  with nothing queued.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time


def add_bias(x: int) -> int:
    s = 0
    for i in range(300):
        s += (x + i) & 7
    return s


def tokenize(stop: threading.Event) -> None:
    words = 0
    while not stop.is_set():
        for w in ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"] * 50:
            words += len(w.upper())


def log_metrics(n: int) -> int:
    s = 0
    for i in range(n):
        s += i % 13
    return s


def main() -> None:
    shape, lib, seconds = sys.argv[1], ctypes.CDLL(sys.argv[2]), float(sys.argv[3])
    end = time.monotonic() + seconds
    steps = 0
    tids = [threading.get_native_id()]
    stop = threading.Event()
    if shape == "gil":
        t = threading.Thread(target=tokenize, args=(stop,), name="tokenizer")
        t.start()
        time.sleep(0.01)
        tids.append(t.native_id or 0)
    while time.monotonic() < end:
        if shape == "launch":
            for i in range(400):
                add_bias(i)
                lib.cudaLaunchKernel(None, 0, 0, None, 0, None)
            lib.cudaStreamSynchronize(None)
        elif shape == "gil":
            for _ in range(10):
                lib.cudaLaunchKernel(None, 0, 0, None, 0, None)
            lib.cudaStreamSynchronize(None)
        else:
            for _ in range(20):
                lib.cudaLaunchKernel(None, 0, 0, None, 0, None)
            lib.cudaStreamSynchronize(None)
            log_metrics(150_000)
        steps += 1
    stop.set()
    print(json.dumps({"pid": os.getpid(), "steps": steps, "tids": tids}))


if __name__ == "__main__":
    main()
