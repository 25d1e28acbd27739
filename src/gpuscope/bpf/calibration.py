"""gpuscope's calibration library (native/calibrate): functions to time the agent's own probes on.

The library exports ``gs_calib_emulated`` (first instruction ``push %rbp``,
which the kernel emulates at a uprobe) and ``gs_calib_stepped`` (first
instruction single-stepped out of line), and ``gs_calib_loop``, which calls one
of them N times and returns the nanoseconds the calls took.
"""

from __future__ import annotations

import ctypes
import enum
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpuscope.errors import BpfObjectMissingError
from gpuscope.platform.elf import function_offsets

LIBRARY_NAME = "libgpuscope_calibrate.so"


class Prologue(enum.Enum):
    """How the kernel runs a probed function's first instruction at a uprobe hit."""

    EMULATED = "emulated"  # push of a register: emulated in the trap, no single step
    STEPPED = "stepped"  # copied out of line and single-stepped: about four times the cost


FUNCTIONS = {Prologue.EMULATED: "gs_calib_emulated", Prologue.STEPPED: "gs_calib_stepped"}


def library_path() -> Path:
    """The calibration library shipped in the package (built beside the stand-in libraries)."""
    path = Path(str(resources.files("gpuscope") / "_standin" / LIBRARY_NAME))
    if not path.is_file():
        raise BpfObjectMissingError(f"calibration library {LIBRARY_NAME} not found at {path}")
    return path


@dataclass
class CalibrationLibrary:
    """The loaded library: where its two functions are in the file, and a timed loop over either."""

    path: Path
    offsets: dict[Prologue, int]
    _loop: Callable[[int, int], int]

    @classmethod
    def load(cls) -> CalibrationLibrary:
        path = library_path()
        found = function_offsets(str(path))
        missing = [n for n in FUNCTIONS.values() if n not in found]
        if missing:
            raise BpfObjectMissingError(f"{path}: no {', '.join(missing)}")
        lib = ctypes.CDLL(str(path))
        loop = lib.gs_calib_loop
        loop.argtypes = [ctypes.c_int, ctypes.c_uint64]
        loop.restype = ctypes.c_uint64
        return cls(path, {p: found[n] for p, n in FUNCTIONS.items()}, loop)

    def loop_ns(self, prologue: Prologue, calls: int) -> int:
        """Call the function with this prologue ``calls`` times; the nanoseconds that took."""
        return int(self._loop(1 if prologue is Prologue.STEPPED else 0, calls))


def prologue_at(code: bytes) -> Prologue:
    """The kind of a function's first instruction on x86-64 (bytes read at its file offset).

    A push of a register (``push %rbp`` = 0x55, ``push %r12`` = 0x41 0x54, …) is
    emulated; anything else is counted as single-stepped, the costlier case, so
    a cost worked out from it is never below the real one.
    """
    if code[:1] and 0x50 <= code[0] <= 0x57:
        return Prologue.EMULATED
    if len(code) >= 2 and code[0] == 0x41 and 0x50 <= code[1] <= 0x57:
        return Prologue.EMULATED
    return Prologue.STEPPED
