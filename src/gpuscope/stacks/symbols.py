"""Name addresses inside ELF files: function symbol tables with bisect, cached on disk by build id.

Loading a symbol table decodes ``.symtab``/``.dynsym`` with numpy (libtorch
has hundreds of thousands of symbols); the sorted table is then saved under
``$GPUSCOPE_CACHE_DIR`` (default ``~/.cache/gpuscope``) as ``symbols/<build-id>.npz``
so the next trace, or a trace of a process that has since exited, loads it in
milliseconds. C++ names are demangled in Python (the ``demangle`` package, spelled
as ``c++filt`` spells them), each once per process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from gpuscope.platform.elf import SHT_DYNSYM, SHT_SYMTAB, STT_FUNC, STT_GNU_IFUNC, ElfError, ElfFile

_SYM_DTYPE = np.dtype(
    [("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")]
)


def cache_dir() -> Path:
    base = os.environ.get("GPUSCOPE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpuscope"
    )
    return Path(base) / "symbols"


@dataclass(frozen=True, slots=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int


class SymbolTable:
    """Function symbols of one ELF file, sorted by address."""

    def __init__(
        self, starts: np.ndarray, sizes: np.ndarray, names: list[str], segments: list[Segment], stripped: bool
    ) -> None:
        self.starts = starts
        self.sizes = sizes
        self.names = names
        self.segments = segments
        self.stripped = stripped

    @classmethod
    def from_elf(cls, path: str) -> tuple[SymbolTable, str | None]:
        """Decode the symbol tables of ``path``; return the table and the file's build id."""
        with ElfFile(path) as elf:
            build_id = elf.build_id()
            starts: list[np.ndarray] = []
            sizes: list[np.ndarray] = []
            names: list[str] = []
            has_symtab = False
            for sec in elf.sections:
                if sec.type not in (SHT_SYMTAB, SHT_DYNSYM) or sec.entsize != 24:
                    continue
                has_symtab |= sec.type == SHT_SYMTAB
                arr = np.frombuffer(elf.read(sec.offset, sec.size), dtype=_SYM_DTYPE)
                kind = arr["info"] & 0xF
                arr = arr[((kind == STT_FUNC) | (kind == STT_GNU_IFUNC)) & (arr["shndx"] != 0) & (arr["value"] != 0)]
                strtab = elf.sections[sec.link]
                raw = elf.read(strtab.offset, strtab.size)
                for off in arr["name"].tolist():
                    names.append(raw[off : raw.find(b"\0", off)].decode("utf-8", "replace"))
                starts.append(arr["value"].astype(np.uint64))
                sizes.append(arr["size"].astype(np.uint64))
            segs = [Segment(s.vaddr, s.offset, s.filesz) for s in elf.segments]
        st = np.concatenate(starts) if starts else np.empty(0, np.uint64)
        sz = np.concatenate(sizes) if sizes else np.empty(0, np.uint64)
        order = np.argsort(st, kind="stable")
        return cls(st[order], sz[order], [names[i] for i in order.tolist()], segs, not has_symtab), build_id

    # -- disk cache ------------------------------------------------------------

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        seg = np.array([(s.vaddr, s.offset, s.filesz) for s in self.segments], dtype=np.uint64).reshape(-1, 3)
        np.savez(
            tmp,
            starts=self.starts,
            sizes=self.sizes,
            names=np.frombuffer("\0".join(self.names).encode(), np.uint8),
            segments=seg,
            stripped=np.array([self.stripped]),
        )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> SymbolTable:
        with np.load(path) as z:
            names = bytes(z["names"]).decode("utf-8", "replace").split("\0") if len(z["names"]) else []
            segs = [Segment(int(a), int(b), int(c)) for a, b, c in z["segments"].tolist()]
            return cls(z["starts"], z["sizes"], names, segs, bool(z["stripped"][0]))

    # -- lookup ----------------------------------------------------------------

    def offset_to_vaddr(self, offset: int) -> int | None:
        for s in self.segments:
            if s.offset <= offset < s.offset + s.filesz:
                return offset - s.offset + s.vaddr
        return None

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(function, offset into it) for a virtual address, or None."""
        i = int(np.searchsorted(self.starts, np.uint64(vaddr), side="right")) - 1
        if i < 0:
            return None
        start, size = int(self.starts[i]), int(self.sizes[i])
        if size and vaddr >= start + size:
            # Inside a gap (static function in a stripped file): do not guess.
            return None
        return self.names[i], vaddr - start


class SymbolCache:
    """Symbol tables by build id (or path, for files without one), memory then disk."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or cache_dir()
        self._by_key: dict[str, SymbolTable | None] = {}

    def table(self, path: str, build_id: str | None) -> SymbolTable | None:
        key = build_id or f"path:{path}"
        if key in self._by_key:
            return self._by_key[key]
        table: SymbolTable | None = None
        disk = self.directory / f"{build_id}.npz" if build_id else None
        if disk is not None and disk.exists():
            try:
                table = SymbolTable.load(disk)
            except (OSError, ValueError, KeyError):
                table = None
        if table is None:
            try:
                table, _ = SymbolTable.from_elf(path)
            except (ElfError, OSError, IndexError, ValueError):
                table = None
            if table is not None and disk is not None:
                try:
                    table.save(disk)
                except OSError:
                    pass  # read-only home: the memory cache still works
        self._by_key[key] = table
        return table


class Demangler:
    """Demangle C++ (Itanium ABI) names, each once: spelled as ``c++filt`` spells them.

    Through the ``demangle`` package; on Python 3.10, where it does not
    install, through ``c++filt`` (or ``llvm-cxxfilt``) when one is on PATH.
    A name that cannot be demangled comes back unchanged.
    """

    def __init__(self) -> None:
        self._pkg: ModuleType | None = None
        self._tool: str | None = None
        self._ready = False
        self._cache: dict[str, str] = {}

    def _load(self) -> None:
        """Import the package at the first mangled name (~15 ms every trace's start-up would pay otherwise)."""
        self._ready = True
        try:
            # Pure Python, so any architecture's wheel installs it; it needs Python 3.11+.
            import demangle

            self._pkg = demangle
        except ImportError:  # Python 3.10: c++filt, where binutils is installed
            self._tool = shutil.which("c++filt") or shutil.which("llvm-cxxfilt")

    def demangle(self, names: list[str]) -> dict[str, str]:
        """Map each name to its demangled spelling (itself when not a mangled C++ name)."""
        todo = sorted({n for n in names if n.startswith("_Z") and n not in self._cache})
        if todo and not self._ready:
            self._load()
        if todo and self._pkg is not None:
            for name in todo:
                # "gnu": binutils' spelling (`> >`, `{lambda(int)#1}`), as the names were shown before.
                self._cache[name] = self._pkg.demangle(name, language="itanium", style="gnu")
        elif todo and self._tool:
            try:
                out = subprocess.run(
                    [self._tool], input="\n".join(todo) + "\n", capture_output=True, text=True, timeout=10, check=True
                ).stdout.splitlines()
            except (OSError, subprocess.SubprocessError):
                out = []
            if len(out) == len(todo):
                self._cache.update(zip(todo, out, strict=True))
        return {n: self._cache.get(n, n) for n in names}


def find_symbols(elf: ElfFile, names: tuple[str, ...]) -> dict[str, int]:
    """Values of a few named symbols, without decoding every name (fast on libpython)."""
    out: dict[str, int] = {}
    for sec in elf.sections:
        if sec.type not in (SHT_SYMTAB, SHT_DYNSYM) or sec.entsize != 24:
            continue
        strtab = elf.sections[sec.link]
        raw = elf.read(strtab.offset, strtab.size)
        arr = np.frombuffer(elf.read(sec.offset, sec.size), dtype=_SYM_DTYPE)
        for name in names:
            if name in out:
                continue
            needle = b"\0" + name.encode() + b"\0"
            pos = raw.find(needle)
            while pos >= 0:
                hit = arr[(arr["name"] == pos + 1) & (arr["shndx"] != 0)]
                if len(hit):
                    out[name] = int(hit["value"][0])
                    break
                pos = raw.find(needle, pos + 1)
    return out
