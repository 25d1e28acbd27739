"""Load a libcudart copy with ctypes and call cudaMalloc at once, then exit.

Usage: python ctypes_malloc.py LIBRARY CALLS. Prints "pid P" and "calls N".
"""

import ctypes
import os
import sys

lib = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2])
ptr = ctypes.c_void_p()
for _ in range(n):
    lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(256))
print(f"pid {os.getpid()}")
print(f"calls {n}")
