"""A small, fast ELF64 reader: section headers, symbol tables, PT_LOAD segments.

Symbol tables are decoded with numpy in one pass, so a library with hundreds
of thousands of symbols (libtorch, libcudnn) loads in milliseconds instead of
the seconds pyelftools needs.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from gpuscope.errors import GpuscopeError
from gpuscope.platform import proc_root

_SYM_DTYPE = np.dtype(
    [
        ("name", "<u4"),
        ("info", "u1"),
        ("other", "u1"),
        ("shndx", "<u2"),
        ("value", "<u8"),
        ("size", "<u8"),
    ]
)
STT_FUNC = 2
STT_GNU_IFUNC = 10
SHT_SYMTAB = 2
SHT_DYNSYM = 11
SHT_NOTE = 7
SHT_DYNAMIC = 6
PT_LOAD = 1
DT_NEEDED = 1
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29


class ElfError(GpuscopeError):
    """The file is not a readable ELF64 little-endian object."""


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int
    addr: int


@dataclass(frozen=True, slots=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int
    flags: int


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    value: int
    size: int
    section: int
    kind: int


class ElfFile:
    """Parse headers of one ELF file. Data is read through a private mmap."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise ElfError(f"{path}: cannot read: {exc}") from None
        data = self._map
        if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ElfError(f"{path}: not a 64-bit little-endian ELF file")
        (
            self.e_type,
            _machine,
            _version,
            self.entry,
            phoff,
            shoff,
            _flags,
            _ehsize,
            phentsize,
            phnum,
            shentsize,
            shnum,
            shstrndx,
        ) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
        self.segments: list[Segment] = []
        for i in range(phnum):
            p_type, p_flags, p_off, p_vaddr, _p, p_filesz, p_memsz, _a = struct.unpack_from(
                "<IIQQQQQQ", data, phoff + i * phentsize
            )
            if p_type == PT_LOAD:
                self.segments.append(Segment(p_vaddr, p_off, p_filesz, p_memsz, p_flags))
        raw: list[tuple[int, ...]] = []
        for i in range(shnum):
            raw.append(struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize))
        names_off = raw[shstrndx][4] if shnum and shstrndx < shnum else 0
        self.sections: list[Section] = []
        for sh_name, sh_type, _fl, sh_addr, sh_off, sh_size, sh_link, _inf, _al, sh_ent in raw:
            self.sections.append(
                Section(self._cstr(names_off + sh_name), sh_type, sh_off, sh_size, sh_link, sh_ent, sh_addr)
            )

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> ElfFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cstr(self, off: int) -> str:
        end = self._map.find(b"\0", off)
        return self._map[off:end].decode("utf-8", "replace")

    def section(self, name: str) -> Section | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None

    def symbols(self, *, dynamic: bool = True, static: bool = True) -> list[Symbol]:
        """All defined symbols of .dynsym and/or .symtab."""
        out: list[Symbol] = []
        for sec in self.sections:
            if not ((dynamic and sec.type == SHT_DYNSYM) or (static and sec.type == SHT_SYMTAB)):
                continue
            arr = np.frombuffer(self._map, dtype=_SYM_DTYPE, count=sec.size // 24, offset=sec.offset)
            strtab = self.sections[sec.link]
            for row in arr[arr["shndx"] != 0]:
                name = self._cstr(strtab.offset + int(row["name"]))
                if name:
                    out.append(
                        Symbol(name, int(row["value"]), int(row["size"]), int(row["shndx"]), int(row["info"]) & 0xF)
                    )
        return out

    def functions(self) -> dict[str, int]:
        """Defined function symbols -> virtual address (dynsym wins over symtab)."""
        out: dict[str, int] = {}
        for sym in self.symbols():
            if sym.kind in (STT_FUNC, STT_GNU_IFUNC) and sym.value and sym.name not in out:
                out[sym.name.split("@", 1)[0]] = sym.value
        return out

    def vaddr_to_offset(self, vaddr: int) -> int | None:
        """File offset of a virtual address, through the PT_LOAD that maps it."""
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return vaddr - seg.vaddr + seg.offset
        return None

    def dynamic(self) -> dict[int, list[str]]:
        """DT_NEEDED / DT_SONAME / DT_RPATH / DT_RUNPATH strings."""
        out: dict[int, list[str]] = {}
        sec = next((s for s in self.sections if s.type == SHT_DYNAMIC), None)
        if sec is None:
            return out
        strtab = self.sections[sec.link]
        for i in range(sec.size // 16):
            tag, val = struct.unpack_from("<qQ", self._map, sec.offset + i * 16)
            if tag == 0:
                break
            if tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH):
                out.setdefault(tag, []).append(self._cstr(strtab.offset + val))
        return out

    def search_path(self, origin: str, ld_library_path: str = "") -> list[str]:
        """The directories ld.so searches for this file's DT_NEEDED libraries, in its order, before its cache.

        ``origin``: the directory of the file itself (``$ORIGIN``). DT_RPATH counts only without DT_RUNPATH,
        and comes before LD_LIBRARY_PATH; DT_RUNPATH after it.
        """
        dyn = self.dynamic()

        def expand(tag: int) -> list[str]:
            entries = ":".join(dyn.get(tag, [])).split(":")
            return [d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin) for d in entries if d]

        runpath = expand(DT_RUNPATH)
        rpath = [] if runpath else expand(DT_RPATH)
        return [*rpath, *(d for d in ld_library_path.split(":") if d), *runpath]

    def build_id(self) -> str | None:
        for sec in self.sections:
            if sec.type != SHT_NOTE:
                continue
            off, end = sec.offset, sec.offset + sec.size
            while off + 12 <= end:
                namesz, descsz, ntype = struct.unpack_from("<III", self._map, off)
                name_off = off + 12
                desc_off = name_off + ((namesz + 3) & ~3)
                if ntype == 3 and self._map[name_off : name_off + namesz].rstrip(b"\0") == b"GNU":
                    return self._map[desc_off : desc_off + descsz].hex()
                off = desc_off + ((descsz + 3) & ~3)
        return None

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self._map[offset : offset + size])


@lru_cache(maxsize=256)
def _function_offsets_cached(path: str, _ino: int, _mtime: int) -> dict[str, int]:
    with ElfFile(path) as elf:
        out: dict[str, int] = {}
        for name, vaddr in elf.functions().items():
            off = elf.vaddr_to_offset(vaddr)
            if off is not None:
                out[name] = off
        return out


def function_offsets(path: str) -> dict[str, int]:
    """Exported function name -> file offset, as uprobes want it (cached per inode)."""
    st = os.stat(path)
    # Not os.path.realpath: a /proc/PID/root path would turn into the agent's own file at that path.
    return _function_offsets_cached(proc_root.resolve(path), st.st_ino, int(st.st_mtime_ns))
