"""Python forking children that each call cudaMalloc through ctypes at once, then exit at once.

Usage: python stack_fork_py.py LIBCUDART N

Each of the N children makes its one call within microseconds of the fork and is gone before the tracer
can read its maps. Prints one JSON line: the (function, line) of each Python level of a child's call,
innermost first.
"""

import ctypes
import json
import os
import sys

LIB = ctypes.CDLL(sys.argv[1])
LIB.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]


def _line(fn: object, delta: int) -> int:
    return int(fn.__code__.co_firstlineno) + delta  # type: ignore[attr-defined]


def allocate(size: int) -> None:
    p = ctypes.c_void_p()
    LIB.cudaMalloc(ctypes.byref(p), size)  # firstlineno + 2


def in_child(size: int) -> None:
    allocate(size)  # firstlineno + 1
    os._exit(0)


def spawn(n: int) -> None:
    for i in range(n):
        if os.fork() == 0:
            in_child(512 + i)  # firstlineno + 3
        os.wait()


LEVELS = [["allocate", _line(allocate, 2)], ["in_child", _line(in_child, 1)], ["spawn", _line(spawn, 3)]]
spawn(int(sys.argv[2]))
print(json.dumps({"file": __file__, "levels": LEVELS}), flush=True)
