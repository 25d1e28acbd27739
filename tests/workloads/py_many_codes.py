"""Python calling cudaMalloc through ctypes from N functions made at run time, each called once.

Usage: python py_many_codes.py LIBCUDART N [free]

Function ``f_I`` calls cudaMalloc with 4096 + I bytes, so a test can tell from
each call's ``bytes`` which function made it, and check that its stack's
innermost Python frame names that function. Every call shows the tracer a
code object it has not described yet: thousands of code descriptions, for
the on-CPU sampler to land in the middle of. With ``free``, each function
is dropped after its call: the next one's code object may take its address.
"""

import ctypes
import sys
from collections.abc import Callable

LIB = ctypes.CDLL(sys.argv[1])
LIB.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]


def make(i: int) -> Callable[[], None]:
    scope: dict[str, object] = {"LIB": LIB, "ctypes": ctypes}
    exec(f"def f_{i}():\n    p = ctypes.c_void_p()\n    LIB.cudaMalloc(ctypes.byref(p), {4096 + i})\n", scope)
    fn = scope[f"f_{i}"]
    assert callable(fn)
    return fn


# Kept alive unless asked: a freed code object's address is often the next one's.
KEEP: list[Callable[[], None]] = []
for i in range(int(sys.argv[2])):
    KEEP.append(make(i))
    KEEP[-1]()
    if sys.argv[3:] == ["free"]:
        KEEP.clear()
