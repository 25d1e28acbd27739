"""Which file is which: build id and inode -> path, learnt from /proc/PID/maps while processes live.

Stack frames name their file by build id (or, for the [sp] return address,
by inode). Paths are learnt whenever a process is seen alive, from the
libraries gpuscope attached to and from exec'd executables, so frames of a
process that has exited still resolve.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpuscope.elf import ElfError, ElfFile


@dataclass(frozen=True, slots=True)
class Mapping:
    start: int
    end: int
    offset: int
    path: str
    executable: bool = True


def read_maps(pid: int) -> list[Mapping]:
    """File-backed mappings of a live process ([] when it is gone)."""
    out: list[Mapping] = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or not parts[5].startswith("/"):
                    continue
                lo, hi = parts[0].split("-")
                out.append(
                    Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5].rstrip("\n"), "x" in parts[1])
                )
    except OSError:
        return []
    return out


class FileIndex:
    """build id -> path and inode -> path for every ELF file seen."""

    def __init__(self) -> None:
        self.by_build_id: dict[str, str] = {}
        self.by_inode: dict[int, str] = {}
        self.build_id_of: dict[str, str | None] = {}
        self._maps: dict[int, list[Mapping]] = {}

    def add_path(self, path: str) -> str | None:
        """Index one file; return its build id."""
        if path in self.build_id_of:
            return self.build_id_of[path]
        bid: str | None = None
        try:
            st = os.stat(path)
            with ElfFile(path) as elf:
                bid = elf.build_id()
        except (OSError, ElfError, IndexError, ValueError):
            self.build_id_of[path] = None
            return None
        self.build_id_of[path] = bid
        self.by_inode.setdefault(st.st_ino, path)
        if bid:
            self.by_build_id.setdefault(bid, path)
        return bid

    def add_process(self, pid: int) -> list[Mapping]:
        """Index every file a live process maps; remember its maps for raw addresses."""
        maps = read_maps(pid)
        if maps:
            self._maps[pid] = maps
            for path in {m.path for m in maps}:
                self.add_path(path)
        return maps

    def maps(self, pid: int) -> list[Mapping]:
        return self._maps.get(pid, [])

    def locate(self, pid: int, ip: int) -> tuple[str, int] | None:
        """(path, file offset) of a raw address through the process's maps (refreshed once on a miss)."""
        for attempt in range(2):
            for m in self._maps.get(pid, []):
                if m.start <= ip < m.end:
                    return m.path, ip - m.start + m.offset
            if attempt == 0 and not self.add_process(pid):
                break
        return None

    def locate_code(self, pid: int, addr: int) -> tuple[str, int] | None:
        """(path, file offset) of an address in an executable mapping, from the cached maps only.

        Never reads /proc: stack scanning asks about every word of a window,
        most of which are not code.
        """
        for m in self._maps.get(pid, []):
            if m.executable and m.start <= addr < m.end:
                return m.path, addr - m.start + m.offset
        return None
