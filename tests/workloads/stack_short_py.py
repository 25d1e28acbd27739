"""Python calling cudaMalloc through ctypes from nested functions, then exiting at once.

Usage: python stack_short_py.py LIBCUDART N

Prints one JSON line: the (function, line) of each Python level of the call,
innermost first, as the test expects to find them. Nothing lingers after the
calls: the process is gone before the tracer sees its first stack.
"""

import ctypes
import json
import sys

LIB = ctypes.CDLL(sys.argv[1])
LIB.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
LEVELS: list[list[object]] = []


def _line(fn: object, delta: int) -> int:
    return int(fn.__code__.co_firstlineno) + delta  # type: ignore[attr-defined]


def allocate(size: int) -> None:
    p = ctypes.c_void_p()
    LIB.cudaMalloc(ctypes.byref(p), size)  # firstlineno + 2


def layer(size: int) -> None:
    allocate(size)  # firstlineno + 1


def run(n: int) -> None:
    for i in range(n):
        layer(256 + i)  # firstlineno + 2


LEVELS = [["allocate", _line(allocate, 2)], ["layer", _line(layer, 1)], ["run", _line(run, 2)]]
run(int(sys.argv[2]))
print(json.dumps({"file": __file__, "levels": LEVELS}), flush=True)
