"""Which file is which: build id and inode -> path, learnt from /proc/PID/maps while processes live.

Stack frames name their file by build id (or, for the [sp] return address,
by inode). Paths are learnt whenever a process is seen alive, from the
libraries gpuscope attached to and from exec'd executables, so frames of a
process that has exited still resolve.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

import numpy as np

from gpuscope.platform.elf import ElfError, ElfFile


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
                out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5].rstrip("\n"), "x" in parts[1]))
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
        # pid -> executable mappings sorted by start, and their starts (for bisect)
        self._code: dict[int, tuple[list[int], list[Mapping]]] = {}
        self._code_bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # pid -> (starts, ends), sorted

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
            code = sorted((m for m in maps if m.executable), key=lambda m: m.start)
            self._code[pid] = ([m.start for m in code], code)
            self._code_bounds[pid] = (
                np.array([m.start for m in code], dtype=np.uint64),
                np.array([m.end for m in code], dtype=np.uint64),
            )
            # Only files mapped executable: build ids matter for code alone, and
            # opening anything else is harmful in the agent's own process. Its
            # maps hold the recording's ``-shm``, and closing any descriptor of a
            # file drops every POSIX lock the process holds on it: SQLite's
            # shared-memory lock would be gone, and the next reader to open the
            # recording would truncate the ``-shm`` under the writer (SIGBUS).
            for path in {m.path for m in code}:
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

    def has_maps(self, pid: int) -> bool:
        return pid in self._code

    def locate_code(self, pid: int, addr: int) -> tuple[str, int] | None:
        """(path, file offset) of an address in an executable mapping, from the cached maps only.

        Never reads /proc: stack scanning asks about every word of a window,
        most of which are not code.
        """
        starts, code = self._code.get(pid, ([], []))
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < code[i].end:
            return code[i].path, addr - code[i].start + code[i].offset
        return None

    def code_words(self, pid: int, words: np.ndarray) -> np.ndarray:
        """The words (uint64) that fall in executable mappings of the process (cached maps only)."""
        bounds = self._code_bounds.get(pid)
        if bounds is None or not len(bounds[0]):
            return words[:0]
        starts, ends = bounds
        i = np.searchsorted(starts, words, side="right") - 1
        inside = (i >= 0) & (words < ends[np.maximum(i, 0)])
        return words[inside]

    def address_of(self, pid: int, path: str, file_offset: int) -> int | None:
        """The address a file offset of ``path`` is mapped at in a process (cached maps only)."""
        for m in self._code.get(pid, ([], []))[1]:
            if m.path == path and m.offset <= file_offset < m.offset + m.end - m.start:
                return m.start + file_offset - m.offset
        return None
