"""A Python workload calling a libcudart through ctypes, the way Python ML code does.

Usage: python py_calls.py LIBCUDART N [THREADS]

Each thread makes N iterations of cudaMalloc(1 MiB), cudaLaunchKernel(grid
128,2,1, block 256,1,1, shmem 48, stream 0x5151), cudaStreamSynchronize and
cudaDeviceSynchronize. Prints one JSON line: the pid, the comm, each worker's
tid, and per API the set of return codes it saw (a real libcudart without a
GPU fails fast with a non-zero cudaError_t).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    n = int(sys.argv[2])
    nthreads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    lib.cudaDeviceSynchronize.argtypes = []
    for f in (lib.cudaMalloc, lib.cudaLaunchKernel, lib.cudaStreamSynchronize, lib.cudaDeviceSynchronize):
        f.restype = ctypes.c_int
    tids: list[int] = []
    rets: dict[str, set[int]] = {
        "cudaMalloc": set(),
        "cudaLaunchKernel": set(),
        "cudaStreamSynchronize": set(),
        "cudaDeviceSynchronize": set(),
    }
    lock = threading.Lock()

    def work() -> None:
        seen: dict[str, set[int]] = {k: set() for k in rets}
        ptr = ctypes.c_void_p()
        stream = ctypes.c_void_p(0x5151)
        for _ in range(n):
            seen["cudaMalloc"].add(lib.cudaMalloc(ctypes.byref(ptr), 1 << 20))
            seen["cudaLaunchKernel"].add(lib.cudaLaunchKernel(None, Dim3(128, 2, 1), Dim3(256, 1, 1), None, 48, stream))
            seen["cudaStreamSynchronize"].add(lib.cudaStreamSynchronize(stream))
            seen["cudaDeviceSynchronize"].add(lib.cudaDeviceSynchronize())
        with lock:
            tids.append(threading.get_native_id())
            for k, v in seen.items():
                rets[k] |= v

    threads = [threading.Thread(target=work) for _ in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open("/proc/self/comm") as comm_file:
        comm = comm_file.read().strip()
    print(json.dumps({"pid": os.getpid(), "comm": comm, "tids": tids, "rets": {k: sorted(v) for k, v in rets.items()}}))


if __name__ == "__main__":
    main()
