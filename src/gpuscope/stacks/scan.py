"""Stack scanning: recover the frames that code without frame pointers hides (Breakpad's technique).

The probe copies a window of the user stack above sp into the record. A word
of it is taken as a return address when (a) it falls in an executable file
mapping, (b) the bytes just before it decode as an x86-64 call instruction,
and (c) for a direct call, the call's target is the start of the function
the frame found so far is in (the callee), so stale return addresses left
by earlier calls are skipped. Indirect calls cannot be checked against the
callee and are taken on (a) and (b) alone. Frames found this way are
heuristic: they carry the marker ``scanned``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

# Where a thread's stack starts: nothing above these is a frame of this call.
BOTTOM_FUNCTIONS = frozenset(
    {
        "_start",
        "__libc_start_main",
        "__libc_start_main_impl",
        "start_thread",
        "clone",
        "clone3",
        "__clone",
        "__clone3",
        "__libc_start_call_main",
    }
)
# The longest call the decoder knows: notrack + REX + FF + ModRM + SIB + disp32.
MAX_CALL_BYTES = 9
_NOTRACK = 0x3E


@dataclass(frozen=True, slots=True)
class CallInstruction:
    """A call that ends at a return address: ``length`` bytes before it.

    ``displacement`` is rel32 of a direct call (E8): the target is the return
    address plus it. None for an indirect call (FF /2), whose target is not
    in the instruction.
    """

    length: int
    displacement: int | None


def _indirect_call_length(code: bytes) -> int | None:
    """Length of the FF /2 call that starts at code[0] ([notrack] [REX] FF ModRM [SIB] [disp]), or None."""
    i = 0
    if i < len(code) and code[i] == _NOTRACK:
        i += 1
    if i < len(code) and 0x40 <= code[i] <= 0x4F:
        i += 1
    if i + 1 >= len(code) or code[i] != 0xFF:
        return None
    modrm = code[i + 1]
    i += 2
    mod, reg, rm = modrm >> 6, (modrm >> 3) & 7, modrm & 7
    if reg != 2:
        return None
    if mod == 3:
        return i
    if rm == 4:  # a SIB byte follows; base 101 with mod 00 means disp32, no base
        if i >= len(code):
            return None
        base = code[i] & 7
        i += 1
        if mod == 0 and base == 5:
            i += 4
    elif mod == 0 and rm == 5:  # RIP-relative: call *sym@GOTPCREL(%rip)
        i += 4
    i += {0: 0, 1: 1, 2: 4}[mod]
    return i


def calls_before(code: bytes) -> list[CallInstruction]:
    """Every call instruction that could end exactly where ``code`` ends.

    ``code`` is the bytes just before a candidate return address (up to
    MAX_CALL_BYTES; fewer at the start of a file). More than one decoding can
    fit the same bytes: the caller checks each against what it knows.
    """
    out: list[CallInstruction] = []
    n = len(code)
    if n >= 5 and code[n - 5] == 0xE8:
        out.append(CallInstruction(5, int.from_bytes(code[n - 4 :], "little", signed=True)))
    for length in range(2, min(n, MAX_CALL_BYTES) + 1):
        if _indirect_call_length(code[n - length :]) == length:
            out.append(CallInstruction(length, None))
    return out


@dataclass(frozen=True, slots=True)
class Callee:
    """The innermost frame found so far: its file and the function it is in (None when unnamed)."""

    path: str
    function: str | None


@dataclass(frozen=True, slots=True)
class ScannedFrame:
    index: int  # word of the window
    path: str
    file_offset: int


def is_return_address(
    path: str,
    file_offset: int,
    callee: Callee,
    code_before: Callable[[str, int], bytes],
    function_at: Callable[[str, int], tuple[str, int] | None],
) -> bool:
    """Is the code at (path, file_offset) right after a call that could have entered ``callee``?

    A direct call must target the start of the callee's function; a direct
    call to something unnamed (a PLT stub) is accepted only when the callee
    lives in another file, which is how calls between files go. An indirect
    call is accepted as it is.
    """
    for call in calls_before(code_before(path, file_offset)):
        if call.displacement is None:
            return True
        target = function_at(path, file_offset + call.displacement)
        if target is None:
            if callee.path != path or callee.function is None:
                return True
        elif target[1] == 0 and (callee.function is None or (callee.path, callee.function) == (path, target[0])):
            return True
    return False


def scan(
    window: tuple[int, ...],
    start: int,
    callee: Callee,
    locate: Callable[[int], tuple[str, int] | None],
    code_before: Callable[[str, int], bytes],
    function_at: Callable[[str, int], tuple[str, int] | None],
    limit: int,
) -> list[ScannedFrame]:
    """Return addresses found in ``window[start:]``, outermost last, at most ``limit``.

    Args:
        callee: the innermost frame already known (the scan looks for its caller first).
        locate: an address -> (path, file offset) when it is in an executable file mapping.
        code_before: (path, file offset) -> up to MAX_CALL_BYTES bytes just before it.
        function_at: (path, file offset) -> (function, offset into it), or None when unnamed.
    """
    out: list[ScannedFrame] = []
    for i in range(start, len(window)):
        if len(out) >= limit:
            break
        loc = locate(window[i])
        if loc is None or not is_return_address(loc[0], loc[1], callee, code_before, function_at):
            continue
        out.append(ScannedFrame(i, loc[0], loc[1]))
        # The function a return address is in: the byte before it is the call's.
        hit = function_at(loc[0], loc[1] - 1)
        callee = Callee(loc[0], hit[0] if hit else None)
        if hit and hit[0] in BOTTOM_FUNCTIONS:
            break
    return out


class CodeReader:
    """Read the bytes before a file offset, with a bounded set of open files and a cache of reads."""

    def __init__(self, max_files: int = 64) -> None:
        self.max_files = max_files
        self._fds: dict[str, int | None] = {}
        self._bytes: dict[tuple[str, int], bytes] = {}

    def before(self, path: str, file_offset: int) -> bytes:
        key = (path, file_offset)
        got = self._bytes.get(key)
        if got is not None:
            return got
        fd = self._fd(path)
        lo = max(0, file_offset - MAX_CALL_BYTES)
        try:
            got = os.pread(fd, file_offset - lo, lo) if fd is not None and file_offset > 0 else b""
        except (OSError, OverflowError):  # an offset from a torn read may not fit pread's signed offset
            got = b""
        if len(self._bytes) > 100_000:
            self._bytes.clear()
        self._bytes[key] = got
        return got

    def _fd(self, path: str) -> int | None:
        if path in self._fds:
            return self._fds[path]
        if len(self._fds) >= self.max_files:
            self.close()
        try:
            fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = None
        self._fds[path] = fd
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            if fd is not None:
                os.close(fd)
        self._fds.clear()
