"""Turn raw stack records into readable stacks: native symbols, Python source lines, merged."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from gpuscope.bpf.wire import PY_CODE_UNDESCRIBED, STACK_MAX_NATIVE, CodeFlag, PyStatus
from gpuscope.stacks.files import FileIndex
from gpuscope.stacks.frames import Frame, Stack
from gpuscope.stacks.python import (
    NOT_CODE,
    CodeInfo,
    Interpreter,
    ProcessMemory,
    PyLayout,
    executing_line,
    lasti_of,
    read_code,
)
from gpuscope.stacks.records import CodeRecord, RawStack
from gpuscope.stacks.scan import BOTTOM_FUNCTIONS, Callee, CodeReader, scan
from gpuscope.stacks.symbols import Demangler, SymbolCache

_INTERPRETER = ("libpython", "python3")
_PY_MARKERS = {
    PyStatus.NO_THREAD: "python: no thread state for this thread",
    PyStatus.NO_OFFSETS: "python: no offsets for this interpreter version",
}


# A process's maps are read again for an address they lack at most this often (a busy JIT maps endlessly).
MAPS_REREAD_S = 1.0


class StackResolver:
    """Name frames with cached symbol tables, file index and code objects."""

    def __init__(self, files: FileIndex | None = None, symbols: SymbolCache | None = None) -> None:
        self.files = files or FileIndex()
        self.symbols = symbols or SymbolCache()
        self.demangler = Demangler()
        self.code = CodeReader()
        self.interpreters: dict[int, Interpreter] = {}
        # py_offsets slot -> the layout loaded there: the one a record's frames were walked with, which names
        # them when the process was registered by the kernel alone (its interpreter never located here).
        self.layouts: dict[int, PyLayout] = {}
        self._code: dict[tuple[int, int], CodeInfo | None] = {}
        # Descriptions BPF had to cut short: used only when the live process cannot be read.
        self._partial: dict[tuple[int, int], CodeInfo] = {}
        # When each process's maps were last read again for an address they did not hold.
        self._maps_reread: dict[int, float] = {}

    def note_code(self, rec: CodeRecord) -> bool:
        """Cache a code object as BPF described it, so it resolves after the process exits.

        True when another object was known at its address (BPF describes an address again when the object
        there is another one): stacks resolved with the old one do not hold for the new one's.
        """
        key = (rec.pid, rec.code)
        replaced = key in self._code or key in self._partial
        if rec.flags & CodeFlag.NOT_CODE:
            self._code[key] = NOT_CODE
        elif rec.flags & CodeFlag.UNREADABLE:
            self._code.pop(key, None)  # not what an earlier program of this pid had there (an exec)
            self._partial.pop(key, None)
        elif rec.complete:
            self._code[key] = CodeInfo(rec.filename, rec.qualname, rec.firstlineno, rec.linetable)
            self._partial.pop(key, None)
        else:
            self._code.pop(key, None)
            self._partial[key] = CodeInfo(rec.filename, rec.qualname, rec.firstlineno, rec.linetable)
        return replaced

    # -- native ----------------------------------------------------------------

    def _name(self, path: str, build_id: str | None, file_offset: int) -> Frame:
        table = self.symbols.table(path, build_id)
        if table is None:
            return Frame("native", module=path, offset=file_offset, marker="unreadable file")
        vaddr = table.offset_to_vaddr(file_offset)
        hit = table.lookup(vaddr) if vaddr is not None else None
        if hit is None:
            return Frame(
                "native", module=path, offset=file_offset, marker="stripped" if table.stripped else "no symbol"
            )
        return Frame("native", function=hit[0], module=path, offset=hit[1])

    def _native(self, pid: int, status: int, build_id: str, value: int) -> tuple[Frame, tuple[str, int] | None]:
        """A frame and its (path, file offset) identity, for de-duplicating the [sp] caller."""
        if status == 1:
            path = self.files.by_build_id.get(build_id)
            if path is None:
                return Frame("native", offset=value, address=f"build-id {build_id}", marker="unknown build id"), None
            return self._name(path, build_id, value), (path, value)
        loc = self.files.locate(pid, value)
        if loc is None and self._reread_maps(pid):
            # Mapped since the maps were read (a module imported, a library loaded): read them again.
            loc = self.files.locate(pid, value)
        if loc is None:
            return Frame("native", address=f"{value:#x}", marker="unmapped (anonymous, JIT or exited)"), None
        return self._name(loc[0], self.files.add_path(loc[0]), loc[1]), loc

    def _reread_maps(self, pid: int) -> bool:
        """Read a live process's maps again, at most once a second; whether they were read."""
        now = time.monotonic()
        if now - self._maps_reread.get(pid, 0.0) < MAPS_REREAD_S:
            return False
        self._maps_reread[pid] = now
        if len(self._maps_reread) > 10_000:
            self._maps_reread = {pid: now}
        return bool(self.files.add_process(pid))

    def _ret_frame(self, raw: RawStack) -> tuple[Frame, tuple[str, int] | None] | None:
        if not raw.ret_ip:
            return None
        path = self.files.by_inode.get(raw.ret_ino) if raw.ret_ino else None
        if path is not None:
            return self._name(path, self.files.add_path(path), raw.ret_off), (path, raw.ret_off)
        return self._native(raw.pid, 2, "", raw.ret_ip)

    # -- stack scanning ----------------------------------------------------------

    def _function_at(self, path: str, file_offset: int) -> tuple[str, int] | None:
        table = self.symbols.table(path, self.files.add_path(path))
        vaddr = table.offset_to_vaddr(file_offset) if table is not None else None
        return table.lookup(vaddr) if table is not None and vaddr is not None else None

    def _scan_start(
        self,
        raw: RawStack,
        native: list[Frame],
        ids: list[tuple[str, int] | None],
        ret: tuple[Frame, tuple[str, int] | None] | None,
    ) -> tuple[int, int, Callee] | None:
        """(frames to keep, first window word to scan, callee) when the frame-pointer walk was short."""
        if len(raw.native) <= 2:
            # No frame pointers: the walk found the probed function and at
            # most one (possibly bogus) frame. The caller at [sp] is word 0.
            if ret is None or ret[1] is None:
                return None
            keep = next((i for i, ident in enumerate(ids) if ident == ret[1]), 1) + 1
            return keep, 1 if raw.window[0] == raw.ret_ip else 0, Callee(ret[1][0], ret[0].function)
        last, ident = native[-1], ids[-1]
        if ident is None or last.function in BOTTOM_FUNCTIONS or len(raw.native) >= STACK_MAX_NATIVE:
            return None
        # The walk stopped inside code without frame pointers: go on from
        # where its outermost return address sits in the window.
        addr = self.files.address_of(raw.pid, ident[0], ident[1])
        if addr is None or addr not in raw.window:
            return None
        return len(native), raw.window.index(addr) + 1, Callee(ident[0], last.function)

    def _scan_locate(
        self, raw: RawStack, ret: tuple[Frame, tuple[str, int] | None] | None
    ) -> Callable[[int], tuple[str, int] | None]:
        """Address -> (path, file offset) in code: the process's maps, else the direct caller's file."""
        bias = path = None
        if ret is not None and ret[1] is not None:
            path, bias = ret[1][0], raw.ret_ip - ret[1][1]

        def locate(addr: int) -> tuple[str, int] | None:
            hit = self.files.locate_code(raw.pid, addr)
            # The process is gone: only its caller's file (and where it was
            # loaded) is known; a word there must name a function.
            if (
                hit is None
                and path is not None
                and bias is not None
                and addr >= bias
                and self._function_at(path, addr - bias)
            ):
                return path, addr - bias
            return hit

        return locate

    def _scanned(
        self,
        raw: RawStack,
        native: list[Frame],
        ids: list[tuple[str, int] | None],
        ret: tuple[Frame, tuple[str, int] | None] | None,
    ) -> list[Frame]:
        """Frames recovered by scanning the stack window (marked ``scanned``); may trim bogus frames."""
        if not raw.window or not native:
            return []
        where = self._scan_start(raw, native, ids, ret)
        if where is None:
            return []
        keep, start, callee = where
        found = scan(
            raw.window,
            start,
            callee,
            self._scan_locate(raw, ret),
            self.code.before,
            self._function_at,
            STACK_MAX_NATIVE - keep,
        )
        if not found:
            return []
        del native[keep:]
        out: list[Frame] = []
        for sf in found:
            f = self._name(sf.path, self.files.add_path(sf.path), sf.file_offset)
            out.append(replace(f, marker="scanned" if f.function else f"scanned, {f.marker}"))
        return out

    def scan_key(self, raw: RawStack) -> bytes:
        """The part of the window that can change the scanned frames: the words in code.

        Records whose frames and code words agree resolve alike, so the
        collector de-duplicates on this (plus RawStack.key). Without the
        process's maps the whole window counts.
        """
        if not raw.window:
            return b""
        words = np.array(raw.window, dtype=np.uint64)
        if not self.files.has_maps(raw.pid):
            return words.tobytes()
        return self.files.code_words(raw.pid, words).tobytes()

    # -- python ----------------------------------------------------------------

    def _python(self, raw: RawStack) -> list[Frame]:
        interp = self.interpreters.get(raw.pid)
        lay = self.layouts.get(raw.py_slot) or (interp.layout if interp is not None else None)
        if lay is None:
            return [Frame("python", marker="python: interpreter not located")]
        mem: ProcessMemory | None = None
        out: list[Frame] = []
        try:
            for flagged, instr in raw.python:
                code = flagged & ~PY_CODE_UNDESCRIBED
                key = (raw.pid, code)
                if flagged & PY_CODE_UNDESCRIBED:
                    # Its description was lost: what is cached for the address may be an earlier object's.
                    self._code.pop(key, None)
                    self._partial.pop(key, None)
                if key not in self._code:
                    if mem is None:
                        mem = ProcessMemory(raw.pid)
                    self._code[key] = (read_code(mem, code, lay) if mem.alive else None) or self._partial.get(key)
                info = self._code[key]
                if info is None:
                    out.append(Frame("python", address=f"{code:#x}", marker="code object unreadable (process exited?)"))
                    continue
                if info is NOT_CODE or info.filename in ("<shim>", "<trampoline>"):
                    continue
                line = executing_line(info, lasti_of(code, instr, lay), lay)
                out.append(Frame("python", function=info.qualname, file=info.filename, line=line))
        finally:
            if mem is not None:
                mem.close()
        return out

    # -- whole stacks ----------------------------------------------------------

    def resolve(self, raw: RawStack) -> Stack:
        native: list[Frame] = []
        ids: list[tuple[str, int] | None] = []
        for nf in raw.native:
            f, ident = self._native(raw.pid, nf.status, nf.build_id, nf.value)
            native.append(f)
            ids.append(ident)
        ret = self._ret_frame(raw)
        # The [sp] return address is the direct caller; frame-pointer unwinding
        # may have it already (a `push %rbp` prologue) or miss it.
        if ret is not None and native:
            same = len(native) > 1 and (
                (ids[1] is not None and ids[1] == ret[1])
                or (
                    native[1].function is not None
                    and (native[1].function, native[1].offset) == (ret[0].function, ret[0].offset)
                )
            )
            if not same:
                native.insert(1, ret[0])
                ids.insert(1, ret[1])
        native.extend(self._scanned(raw, native, ids, ret))
        names = self.demangler.demangle([f.function for f in native if f.function])
        native = [
            Frame(f.kind, names.get(f.function, f.function), f.module, f.offset, f.file, f.line, f.address, f.marker)
            if f.function
            else f
            for f in native
        ]
        python = self._python(raw) if raw.py_status == PyStatus.OK and raw.python else []
        marker = _PY_MARKERS.get(raw.py_status)
        frames = _merge(native, python)
        if marker:
            frames.append(Frame("python", marker=marker))
        markers = sorted({f.marker for f in frames if f.marker})
        return Stack(tuple(frames), len(native), len(python), "; ".join(markers) or None)


def _is_interpreter(f: Frame) -> bool:
    return f.kind == "native" and f.module is not None and os.path.basename(f.module).startswith(_INTERPRETER)


def _merge(native: list[Frame], python: list[Frame]) -> list[Frame]:
    """Splice Python frames in where the native stack enters the interpreter.

    Native frames before the first interpreter frame (the CUDA library, libffi,
    _ctypes) come first, then the Python frames, then native frames after the
    last interpreter frame (main, libc). Without frame pointers in the
    interpreter the native walk stops early or wanders: unnamed frames after
    the boundary are dropped when Python frames replace them.
    """
    if not python:
        return native
    first = next((i for i, f in enumerate(native) if _is_interpreter(f)), None)
    if first is None:
        head = native
        while head and head[-1].function is None:
            head = head[:-1]
        return [*head, *python]
    last = max(i for i, f in enumerate(native) if _is_interpreter(f))
    tail = [f for f in native[last + 1 :] if f.function]
    return [*native[:first], *python, *tail]
