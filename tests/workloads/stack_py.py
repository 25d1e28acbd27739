"""Python calling the stand-in libcudart through named levels, a class method and a thread.

Usage: python stack_py.py LIBCUDART N

Prints one JSON line: for each call site, the (file, line, function) of
every Python level, innermost first, as the test expects to find them.
The function names are not ASCII on purpose (full Unicode names).
"""

import ctypes
import json
import sys
import threading
import time

LIB = ctypes.CDLL(sys.argv[1])
LIB.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
LIB.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
SITES: dict[str, list[list[object]]] = {}


def here(depth: int = 1) -> list[object]:
    f = sys._getframe(depth)
    return [f.f_code.co_filename, f.f_lineno, f.f_code.co_name]


def allocate_kv_cache(n: int) -> None:
    p = ctypes.c_void_p()
    SITES.setdefault("alloc", [[__file__, allocate_kv_cache.__code__.co_firstlineno + 3, "allocate_kv_cache"]])
    LIB.cudaMalloc(ctypes.byref(p), n)  # line = firstlineno + 3


class Modèle:
    def synchronisé(self) -> None:
        SITES.setdefault("sync", [[__file__, Modèle.synchronisé.__code__.co_firstlineno + 2, "Modèle.synchronisé"]])
        LIB.cudaStreamSynchronize(ctypes.c_void_p(0x55))  # line = firstlineno + 2


def middle(n: int) -> None:
    allocate_kv_cache(n)
    Modèle().synchronisé()


def outer(n: int) -> None:
    for i in range(n):
        middle(4096 + i)


def main() -> None:
    n = int(sys.argv[2])
    outer(n)
    t = threading.Thread(target=outer, args=(n,), name="worker")
    t.start()
    t.join()
    print(json.dumps(SITES, ensure_ascii=False), flush=True)
    # Code objects are read from the live process: linger a moment, as any
    # real training process does, so the tracer reads them before exit.
    time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.5)


if __name__ == "__main__":
    main()
