"""Helpers shared by the privileged tests: workload output, background processes, deadlines."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import TraceRun

CUDA_RUNTIME_OPS = (
    "cudaMalloc",
    "cudaMemcpy",
    "cudaLaunchKernel",
    "cudaMemcpyAsync",
    "cudaStreamSynchronize",
    "cudaFree",
)
CUDA_DRIVER_OPS = ("cuLaunchKernel", "cuMemAlloc", "cuMemFree", "cuCtxSynchronize")


def pack_dim(x: int, y: int, z: int) -> int:
    """The launch-geometry packing of events.h: x | y << 32 | z << 48."""
    return x | y << 32 | z << 48


def ids_from(stdout: str) -> tuple[int, list[int]]:
    """(pid, worker tids) from the "pid P" / "tid T" lines a C workload prints."""
    pid = None
    tids: list[int] = []
    for line in stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "pid":
            pid = int(value)
        elif key == "tid":
            tids.append(int(value))
    assert pid is not None, f"workload printed no pid: {stdout!r}"
    return pid, tids


def json_line(stdout: str) -> dict[str, Any]:
    """The one JSON line a Python workload prints among the trace summary."""
    for line in stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"workload printed no JSON line: {stdout!r}")


def session_drops(run: TraceRun) -> dict[str, int]:
    ((drops,),) = run.query("SELECT drops FROM sessions")
    return json.loads(str(drops))


def median(values: list[int]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def gpuscope_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuscope", *args]


class LineReader:
    """Read a pipe's lines on a thread so a test can wait for one with a deadline."""

    def __init__(self, pipe) -> None:
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._t = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
        self._t.start()

    def _pump(self, pipe) -> None:
        for line in pipe:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, predicate, timeout: float) -> str:
        """Return the first line (new or already read) for which ``predicate`` holds."""
        for line in self.lines:
            if predicate(line):
                return line
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                got = self._q.get(timeout=left)
            except queue.Empty:
                break
            if got is None:
                break
            self.lines.append(got)
            if predicate(got):
                return got
        raise AssertionError(f"no matching line within {timeout}s; got: {''.join(self.lines)!r}")

    def rest(self, timeout: float) -> str:
        """Everything up to end of file (bounded by ``timeout``)."""
        self._t.join(timeout)
        while True:
            try:
                line = self._q.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return "".join(self.lines)


@contextmanager
def background(cmd: list[str], **kw) -> Iterator[subprocess.Popen[str]]:
    """A process that is always ended (SIGKILL by pid) when the block exits."""
    proc = subprocess.Popen(cmd, text=True, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


HOG = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {0})\n"
    "print(os.getpid(), flush=True)\n"
    "end = time.monotonic() + float(sys.argv[1])\n"
    "while time.monotonic() < end:\n"
    "    pass\n"
)


@contextmanager
def cpu0_hogs(n: int, max_s: float = 60) -> Iterator[list[int]]:
    """``n`` busy-looping processes pinned to CPU 0 (each ends itself after ``max_s``)."""
    procs = [
        subprocess.Popen([sys.executable, "-c", HOG, str(max_s)], stdout=subprocess.PIPE, text=True) for _ in range(n)
    ]
    try:
        # Reading the pid each prints means it is pinned and spinning.
        pids = [int(LineReader(p.stdout).wait_for(str.strip, timeout=10)) for p in procs]
        assert pids == [p.pid for p in procs]
        yield pids
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)


def free_pid() -> int:
    """A pid no process has right now."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 300, -1):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    raise AssertionError("no free pid")


def cudart_script(
    path: Path,
    cudart: Path,
    calls: int,
    *,
    nbytes: int = 256,
    sync: bool = True,
    sleep_each_s: float = 0.0,
    pause: tuple[int, float] | None = None,
    then: str = "",
) -> Path:
    """Write a Python workload: ``calls`` cudaMalloc of ``nbytes`` (each followed by cudaStreamSynchronize
    with ``sync``) through ctypes, sleeping ``sleep_each_s`` after each and ``pause`` = (every N, seconds);
    then it prints "calls done" and runs ``then`` (e.g. ``sys.stdin.readline()`` to stay until told)."""
    lines = [
        "import ctypes, sys, time",
        f"lib = ctypes.CDLL({str(cudart)!r})",
        "ptr = ctypes.c_void_p()",
        f"for i in range({calls}):",
        f"    lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t({nbytes}))",
    ]
    if sync:
        lines.append("    lib.cudaStreamSynchronize(None)")
    if sleep_each_s:
        lines.append(f"    time.sleep({sleep_each_s})")
    if pause is not None:
        lines += [f"    if i % {pause[0]} == {pause[0] - 1}:", f"        time.sleep({pause[1]})"]
    lines.append('print("calls done", flush=True)')
    if then:
        lines.append(then)
    path.write_text("\n".join(lines) + "\n")
    return path
