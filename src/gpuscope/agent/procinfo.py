"""Facts about a process read from /proc at first sight (gone after it exits)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    comm: str
    cmdline: str
    exe: str
    cgroup_path: str


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def cgroup_path(pid: int) -> str:
    """The cgroup v2 path (``0::`` line), else the longest v1 path."""
    best = ""
    for line in _read(f"/proc/{pid}/cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[2] not in ("", "/"):
            return parts[2]
        if len(parts[2]) > len(best):
            best = parts[2]
    return best


def read_process(pid: int) -> ProcessInfo | None:
    comm = _read(f"/proc/{pid}/comm").strip()
    if not comm:
        return None
    cmdline = _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    return ProcessInfo(pid, comm, cmdline, exe, cgroup_path(pid))
