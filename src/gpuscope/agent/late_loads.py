"""Libraries mapped after tracing began: attach to them while their process waits.

The kernel side (bpf/loads.bpf.c) reports the first mapping of a CUDA, driver
or NCCL library file nobody has seen, and stops the process there. This thread
wakes on each report, finds the file, attaches its probes and lets the process
go, so the library's first call is traced: context creation, the first
allocations and ``ncclCommInitRank`` happen right after ``import torch`` or a
worker's start, and they are the calls cold-start analysis needs.

Every path out of here resumes the process; the kernel also resumes it on its
own after ``HOLD_MAX_S`` and when the agent dies.
"""

from __future__ import annotations

import os
import select
import threading
import time
from dataclasses import dataclass

import numpy as np

from gpuscope.agent.discovery import Discovery, reachable_path
from gpuscope.agent.tracer import LibState, Tracer
from gpuscope.bpf.wire import HoldKind

# How long the thread sleeps in poll() at most; a report, or stop(), wakes it at once.
_POLL_MS = 50


@dataclass(frozen=True, slots=True)
class LateLoad:
    """One late library load and what was done about it."""

    pid: int
    path: str  # the file as found, or its name when it could not be found
    held: HoldKind
    held_ms: float  # how long the process was stopped (0 when it was not)
    attached: bool  # probes were attached (now or before)


def _paths_in_maps(pid: int, ino: int) -> list[str]:
    out = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[4] == str(ino):
                    out.append(parts[5].strip())
    except OSError:
        pass
    return out


def mapped_file(pid: int, fd: int, key: tuple[int, int]) -> str | None:
    """A path that reaches the file ``pid`` mapped from ``fd``, checked against the kernel's (dev, inode).

    The path the process used, when it names the same file here; else the same
    path under ``/proc/PID/root`` (a process in another mount namespace).
    """
    seen = []
    try:
        seen.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    except OSError:
        pass
    seen += _paths_in_maps(pid, key[1])
    return next((found for path in seen if (found := reachable_path(pid, path, key)) is not None), None)


class LateLoads:
    """The watcher thread: one per trace."""

    def __init__(self, tracer: Tracer, discovery: Discovery) -> None:
        self.tracer = tracer
        self.discovery = discovery
        self.loads: list[LateLoad] = []
        self.errors: list[str] = []
        self.not_resumed: list[int] = []  # held processes this agent may not signal: let go by the hold limit
        self._stop = threading.Event()
        # Written once by stop(): wakes the thread out of poll() at once.
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="gpuscope-late-loads", daemon=True)

    def start(self) -> None:
        if self.tracer.load_fd is not None:
            self._thread.start()

    def stop(self) -> None:
        """Handle what is reported so far, then stop; no process stays held."""
        if not self._stop.is_set():
            self._stop.set()
            os.write(self._wake_w, b"x")
            if self._thread.is_alive():
                self._thread.join(timeout=5)
            if not self._thread.is_alive():
                for fd in (self._wake_r, self._wake_w):
                    os.close(fd)
        if not self._thread.is_alive():
            self.handle(self.tracer.read_loads())
        for pid in self.tracer.held_pids():
            self.tracer.release(pid)

    def _run(self) -> None:
        fd = self.tracer.load_fd
        assert fd is not None
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stop.is_set():
            poller.poll(_POLL_MS)
            self.handle(self.tracer.read_loads())

    def handle(self, events: np.ndarray) -> None:
        for ev in events:
            pid = int(ev["pid"])
            key = (int(ev["dev"]), int(ev["ino"]))
            held = HoldKind(int(ev["held"]))
            path, attached = ev["name"].decode("utf-8", "replace"), False
            try:
                path, attached = self._attach(pid, int(ev["fd"]), key, path)
            except Exception as exc:  # a held process must be let go whatever failed
                self.errors.append(f"pid {pid}: {path}: {exc}")
            finally:
                held_ms = 0.0
                if held == HoldKind.STOPPED:
                    if not self.tracer.release(pid):
                        self.not_resumed.append(pid)
                    held_ms = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - int(ev["ts_ns"])) / 1e6
            self.loads.append(LateLoad(pid, path, held, held_ms, attached))

    def _attach(self, pid: int, fd: int, key: tuple[int, int], name: str) -> tuple[str, bool]:
        path = mapped_file(pid, fd, key)
        if path is None:
            # Gone, or unreachable from here: do not stop the next process for it.
            self.tracer.mark_library(key, LibState.NOT_PROBED)
            return name, False
        lib, _ = self.discovery.add_mapped(path, f"mapped by pid {pid}")
        if lib is None:
            self.tracer.mark_library(key, LibState.NOT_PROBED)
            return path, False
        self.tracer.attach_library(lib)
        # The kernel's key can differ from stat's (overlayfs): mark the one it reported too.
        self.tracer.mark_library(key, LibState.PROBED)
        return lib.path, True
