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
    # Exited, not yet reaped (a zombie): the name stays, the program and command line are gone.
    exited: bool = False


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


def _exited(pid: int) -> bool:
    """Whether the process has exited and awaits its parent (a zombie): its name stays, its program is gone."""
    # The state follows the name in parentheses, which may itself hold ") "; nothing to read: gone.
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return not fields or fields[0] in ("Z", "X")


MAX_CMDLINE_CHARS = 1 << 20


def read_process(pid: int) -> ProcessInfo | None:
    """What /proc says of a process; None once it is gone (``exited``: a zombie, its program already gone)."""
    comm = _read(f"/proc/{pid}/comm").strip()
    if not comm:
        return None
    # Bounded as a reader accepts it (store.conformance): the kernel's limit grows with the stack's.
    cmdline = _read(f"/proc/{pid}/cmdline")[:MAX_CMDLINE_CHARS].replace("\0", " ").strip()
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        # A kernel thread has no program, another user's needs CAP_SYS_PTRACE, an exited one has lost it.
        return ProcessInfo(pid, comm, cmdline, "", cgroup_path(pid), exited=_exited(pid))
    return ProcessInfo(pid, comm, cmdline, exe, cgroup_path(pid))
