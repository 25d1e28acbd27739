"""Paths into another process's file system (``/proc/PID/root/...``), resolved without leaving it.

A process in a container sees its own mount namespace; ``/proc/PID/root``
reaches it from the agent's. ``os.path.realpath`` must not be used on such a
path: the ``root`` link reads as ``/``, so the result names the *agent's*
file at the same path (the host's ``libcudart``, not the container's), and a
symlink inside the container that points at an absolute path would be
followed on the host as well. ``resolve`` follows links one component at a
time, re-rooting absolute targets at the process's root.
"""

from __future__ import annotations

import errno
import os
import re


def kernel_file_key(st: os.stat_result) -> tuple[int, int]:
    """A file's (dev, inode) as the kernel names it (BPF, /proc/PID/maps): s_dev is MAJOR << 20 | MINOR."""
    return (os.major(st.st_dev) << 20) | os.minor(st.st_dev), st.st_ino


_PROC_ROOT = re.compile(r"^(/proc/\d+/root)(/.*)?$")
MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup


def split_root(path: str) -> tuple[str, str] | None:
    """``("/proc/PID/root", "/rest")`` for a path into a process's root; None for any other path."""
    m = _PROC_ROOT.match(path)
    return (m.group(1), m.group(2) or "/") if m else None


def resolve(path: str) -> str:
    """``os.path.realpath`` for paths of this mount namespace; for ``/proc/PID/root/...``, the same inside it.

    Raises OSError (ELOOP) on a symlink loop inside a process's root.
    """
    parts = split_root(path)
    if parts is None:
        return os.path.realpath(path)
    root, rest = parts
    todo = [p for p in rest.split("/") if p]
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        try:
            target = os.readlink(root + "/" + "/".join([*done, part]))
        except OSError:
            done.append(part)  # not a link (or not there: resolved as far as it goes, as realpath does)
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        if target.startswith("/"):
            done = []
        todo = [p for p in target.split("/") if p] + todo
    return root + "/" + "/".join(done)
