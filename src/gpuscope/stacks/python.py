"""CPython support: where frames live in each interpreter version, and reading code objects.

The in-kernel walk (bpf/include/stacks.bpf.h) needs a handful of struct
offsets per interpreter version. They come from a shipped table (values from
``offsetof`` compiled against each version's own headers with
``Py_BUILD_CORE``), and on 3.13+ from the interpreter's ``_Py_DebugOffsets``,
read from the live process and preferred over the table. A layout is used
only after a sanity check (the cookie on 3.13+, and a readable thread list).

User space then turns each (code object, instruction) pair into
``file:line in qualname`` by reading the code object from ``/proc/PID/mem``
and decoding its line table at the *executing* instruction.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, replace

from gpuscope.platform.elf import ElfError, ElfFile
from gpuscope.stacks.files import Mapping, read_maps
from gpuscope.stacks.symbols import find_symbols


@dataclass(frozen=True, slots=True)
class PyLayout:
    """Offsets for one CPython minor version (x86-64, default build)."""

    minor: int
    # in-kernel walk (struct gs_py_offsets)
    interp_head: int
    threads_head: int
    tstate_next: int
    tstate_tid: int
    tstate_frame: int
    cframe_frame: int  # -1: tstate_frame points at the frame itself
    frame_code: int
    frame_previous: int
    frame_instr: int
    tid_is_pthread: bool  # 3.10 has no native_thread_id: match pthread_self (fs base)
    instr_is_int: bool  # 3.10: f_lasti (instruction index); later: pointer into co_code_adaptive
    # code objects, read in user space
    co_filename: int
    co_qualname: int  # co_name on 3.10 (no qualname before 3.11)
    co_firstlineno: int
    co_linetable: int
    co_code_adaptive: int
    ascii_size: int  # sizeof(PyASCIIObject)
    compact_size: int  # sizeof(PyCompactUnicodeObject)

    @property
    def slot(self) -> int:
        return self.minor - 10

    def pack(self) -> bytes:
        """struct gs_py_offsets."""
        return struct.pack(
            "<IIIIIiIIIIIIIIIIII",
            self.interp_head,
            self.threads_head,
            self.tstate_next,
            self.tstate_tid,
            self.tstate_frame,
            self.cframe_frame,
            self.frame_code,
            self.frame_previous,
            self.frame_instr,
            int(self.tid_is_pthread),
            int(self.instr_is_int),
            self.co_filename,
            self.co_qualname,
            self.co_firstlineno,
            self.co_linetable,
            self.ascii_size,
            self.compact_size,
            0,
        )


# offsetof() against each version's headers (pyenv 3.10.13, 3.11.7, 3.12.1, 3.13.0).
LAYOUTS: dict[int, PyLayout] = {
    10: PyLayout(10, 32, 8, 8, 176, 24, -1, 32, 24, 96, True, True, 104, 112, 40, 120, 0, 48, 72),
    11: PyLayout(11, 40, 16, 8, 160, 56, 8, 32, 48, 56, False, False, 112, 128, 72, 136, 184, 48, 72),
    12: PyLayout(12, 40, 72, 8, 144, 56, 0, 0, 8, 56, False, False, 112, 128, 68, 136, 192, 40, 56),
    13: PyLayout(13, 632, 7344, 8, 160, 72, -1, 0, 8, 56, False, False, 112, 128, 68, 136, 200, 40, 56),
}
_DEBUG_COOKIE = b"xdebugpy"


# The end of user space on x86_64 (47-bit addresses); above it nothing of a process can be read.
USER_ADDRESS_LIMIT = 1 << 47


class ProcessMemory:
    """Read another process's memory through /proc/PID/mem (needs ptrace rights: root here)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fd: int | None = None
        try:
            self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except OSError:
            self._fd = None

    @property
    def alive(self) -> bool:
        return self._fd is not None

    def read(self, addr: int, size: int) -> bytes | None:
        """The ``size`` bytes at ``addr``, or None when they cannot be read.

        Pointers come from memory that the process may be rewriting while we
        read it, so any value is possible: one above the user address space
        is not readable (and would not fit pread's signed offset).
        """
        if self._fd is None or addr <= 0 or addr + size > USER_ADDRESS_LIMIT:
            return None
        try:
            data = os.pread(self._fd, size, addr)
        except OSError:
            return None
        return data if len(data) == size else None

    def u64(self, addr: int) -> int | None:
        b = self.read(addr, 8)
        return struct.unpack("<Q", b)[0] if b else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True, slots=True)
class Interpreter:
    """A CPython runtime found in a process."""

    pid: int
    path: str
    version: tuple[int, int, int]
    runtime: int
    layout: PyLayout
    code_type: int = 0  # PyCode_Type - _PyRuntime (0: unknown)


def version_of(elf: ElfFile, path: str, symbols: dict[str, int]) -> tuple[int, int, int] | None:
    vaddr = symbols.get("Py_Version")
    if vaddr is not None:
        off = elf.vaddr_to_offset(vaddr)
        if off is not None:
            hexversion = struct.unpack("<I", elf.read(off, 4))[0]
            return hexversion >> 24, (hexversion >> 16) & 0xFF, (hexversion >> 8) & 0xFF
    m = re.search(r"python3\.(\d+)", os.path.basename(path))
    return (3, int(m.group(1)), 0) if m else None


def code_type_of(symbols: dict[str, int]) -> int:
    """PyCode_Type - _PyRuntime in a build (both in its data, well within 2 GiB of each other); 0 if unknown."""
    if "PyCode_Type" not in symbols or "_PyRuntime" not in symbols:
        return 0
    delta = symbols["PyCode_Type"] - symbols["_PyRuntime"]
    return delta if -(1 << 31) <= delta < 1 << 31 else 0


def find_interpreter(pid: int, maps: list[Mapping] | None = None) -> Interpreter | None:
    """Locate _PyRuntime in a live process (libpython or a static python), or None."""
    maps = maps if maps is not None else read_maps(pid)
    seen: set[str] = set()
    for m in maps:
        base = os.path.basename(m.path)
        if m.path in seen or not ("python3" in base or "libpython" in base):
            continue
        seen.add(m.path)
        try:
            with ElfFile(m.path) as elf:
                syms = find_symbols(elf, ("_PyRuntime", "Py_Version", "PyCode_Type"))
                if "_PyRuntime" not in syms:
                    continue
                version = version_of(elf, m.path, syms)
                first = min((s for s in elf.segments), key=lambda s: s.vaddr, default=None)
        except (ElfError, OSError, IndexError, ValueError):
            continue
        if version is None or first is None:
            continue
        low = min((x.start - x.offset for x in maps if x.path == m.path), default=None)
        if low is None:
            continue
        # The mapping at file offset 0 holds the first PT_LOAD: the load bias.
        bias = low - (first.vaddr - first.offset)
        layout = LAYOUTS.get(version[1])
        runtime = bias + syms["_PyRuntime"]
        if version[1] >= 13:
            layout = debug_offsets(pid, runtime, version[1]) or layout
        if layout is None:
            return Interpreter(pid, m.path, version, runtime, replace(LAYOUTS[11], minor=-1))
        return Interpreter(pid, m.path, version, runtime, layout, code_type_of(syms))
    return None


def debug_offsets(pid: int, runtime: int, minor: int) -> PyLayout | None:
    """The layout from the interpreter's own _Py_DebugOffsets (3.13+), or None when unreadable."""
    mem = ProcessMemory(pid)
    try:
        raw = mem.read(runtime, 8 * 44)
    finally:
        mem.close()
    return layout_from_debug_offsets(raw, minor)


def layout_from_debug_offsets(raw: bytes | None, minor: int) -> PyLayout | None:
    """A layout from the first 44 words of _PyRuntime (its _Py_DebugOffsets, 3.13+), or None."""
    if raw is None or len(raw) < 8 * 44 or raw[:8] != _DEBUG_COOKIE:
        return None
    a = struct.unpack("<44Q", raw[: 8 * 44])
    if a[2]:  # free-threaded build: other object layouts, not supported
        return None
    base = LAYOUTS.get(minor) or LAYOUTS[13]
    return replace(
        base,
        minor=minor,
        interp_head=a[5],
        threads_head=a[9],
        tstate_next=a[21],
        tstate_tid=a[25],
        tstate_frame=a[23],
        cframe_frame=-1,
        frame_previous=a[29],
        frame_code=a[30],
        frame_instr=a[31],
        co_filename=a[35],
        co_qualname=a[37],
        co_linetable=a[38],
        co_firstlineno=a[39],
        co_code_adaptive=a[43],
    )


def sanity_check(interp: Interpreter) -> bool:
    """Read the interpreter's thread list: the offsets are trusted only if it is sane."""
    lay = interp.layout
    if lay.minor < 0:
        return False
    mem = ProcessMemory(interp.pid)
    try:
        head = mem.u64(interp.runtime + lay.interp_head)
        if not head:
            return True  # not initialised yet: nothing to walk, nothing wrong
        tstate = mem.u64(head + lay.threads_head)
        for _ in range(64):
            if not tstate:
                return True
            if tstate < 4096 or tstate >= 1 << 47:
                return False
            tstate = mem.u64(tstate + lay.tstate_next)
        return True
    finally:
        mem.close()


# -- code objects -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CodeInfo:
    filename: str
    qualname: str
    firstlineno: int
    linetable: bytes


def read_unicode(mem: ProcessMemory, addr: int, lay: PyLayout, limit: int = 4096) -> str | None:
    """Decode a compact str object (ASCII or UCS1/2/4): full Unicode names."""
    hdr = mem.read(addr, 40)
    if hdr is None:
        return None
    length = struct.unpack_from("<q", hdr, 16)[0]
    state = struct.unpack_from("<I", hdr, 32)[0]
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4) or not 0 <= length <= limit:
        return None
    data = mem.read(addr + (lay.ascii_size if ascii_ else lay.compact_size), length * kind)
    if data is None:
        return None
    return data.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind], "replace")


def read_bytes(mem: ProcessMemory, addr: int, limit: int = 1 << 20) -> bytes | None:
    size = mem.u64(addr + 16)
    if size is None or size > limit:
        return None
    return mem.read(addr + 32, size) if size else b""


# What a frame that runs no Python code (3.12+ C-stack entry frames) resolves to.
NOT_CODE = CodeInfo("", "", 0, b"")


def _type_name(mem: ProcessMemory, obj: int) -> bytes | None:
    tp = mem.u64(obj + 8)  # ob_type
    name = mem.u64(tp + 24) if tp else None  # tp_name
    raw = mem.read(name, 16) if name else None
    return raw.split(b"\0", 1)[0] if raw else None


def read_code(mem: ProcessMemory, code: int, lay: PyLayout) -> CodeInfo | None:
    """The code object at ``code``; NOT_CODE for a frame's non-code executable; None when unreadable."""
    raw = mem.read(code, max(lay.co_linetable, lay.co_qualname, lay.co_filename) + 8)
    if raw is None:
        return None
    tname = _type_name(mem, code)
    if tname is not None and tname != b"code":
        return NOT_CODE

    def ptr(off: int) -> int:
        return int(struct.unpack_from("<Q", raw, off)[0])

    filename = read_unicode(mem, ptr(lay.co_filename), lay)
    qualname = read_unicode(mem, ptr(lay.co_qualname), lay)
    table = read_bytes(mem, ptr(lay.co_linetable))
    if filename is None or qualname is None or table is None:
        return None
    return CodeInfo(filename, qualname, struct.unpack_from("<i", raw, lay.co_firstlineno)[0], table)


def lasti_of(code: int, instr: int, lay: PyLayout) -> int:
    """Index (in 2-byte code units) of the executing instruction."""
    if lay.instr_is_int:
        return int(instr) if instr < 1 << 31 else -1
    return (instr - (code + lay.co_code_adaptive)) // 2


def line_310(table: bytes, firstlineno: int, addr: int) -> int | None:
    """PEP 626 line table (3.10): (byte delta, signed line delta) pairs; -128 = no line."""
    line, start, end = firstlineno, 0, 0
    for i in range(0, len(table) - 1, 2):
        start, end = end, end + table[i]
        ldelta = table[i + 1] - 256 if table[i + 1] > 127 else table[i + 1]
        cur = None if ldelta == -128 else line + ldelta
        if ldelta != -128:
            line += ldelta
        if start <= addr < end:
            return cur
    return None


def line_311(table: bytes, firstlineno: int, lasti: int) -> int | None:
    """PEP 657 location table (3.11+): the line of code unit ``lasti``."""
    pos, n, line, unit = 0, len(table), firstlineno, 0

    def varint() -> int:
        nonlocal pos
        b = table[pos]
        pos += 1
        val, shift = b & 63, 6
        while b & 64:
            b = table[pos]
            pos += 1
            val |= (b & 63) << shift
            shift += 6
        return val

    def svarint() -> int:
        v = varint()
        return -(v >> 1) if v & 1 else v >> 1

    while pos < n:
        first = table[pos]
        pos += 1
        code, length = (first >> 3) & 15, (first & 7) + 1
        cur: int | None
        if code == 15:
            cur = None
        elif code == 14:
            line += svarint()
            cur = line
            varint(), varint(), varint()
        elif code == 13:
            line += svarint()
            cur = line
        elif code >= 10:
            line += code - 10
            cur = line
            pos += 2
        else:
            cur = line
            pos += 1
        if unit <= lasti < unit + length:
            return cur
        unit += length
    return None


def executing_line(info: CodeInfo, lasti: int, lay: PyLayout) -> int | None:
    if lasti < 0:
        return info.firstlineno
    try:
        if lay.minor == 10:
            return line_310(info.linetable, info.firstlineno, lasti * 2)
        return line_311(info.linetable, info.firstlineno, lasti)
    except IndexError:
        return None
