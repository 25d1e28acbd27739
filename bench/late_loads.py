"""late_loads: what holding a process at a late library load costs it, and what watching costs everyone.

hold: an in-process system-wide tracer (Tracer + LateLoads, as a trace runs
them) while `dlopen_calls` loads a fresh copy of the stand-in libcudart (a new
inode each time, so each run is a late load) and calls it 2,000 times at once.
Reported: how long the kernel held the process (report -> probes attached ->
SIGCONT), the workload's wall time beside a bare run, and whether every call
was recorded.

mmap: bench/mmaploop.c (mmap+munmap pairs without MAP_FIXED, pinned) with
bpf/loads.bpf.c's programs attached and not, interleaved repetition by
repetition; the figure is the added ns per pair.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from benchlib import BUILD_DIR, CONSUMER_CPU, PRODUCER_CPU, ROOT, STANDIN_CUDART, Result, build_c, median, pin_to, unpin

from gpuscope.agent.discovery import Discovery
from gpuscope.agent.late_loads import LateLoads
from gpuscope.agent.tracer import TraceOptions, Tracer
from gpuscope.bpf.loader import BpfObject, object_path
from gpuscope.bpf.wire import HoldKind
from gpuscope.model.ops import Op

CALLS = 2000
LOAD_PROGRAMS = ("gs_vm_unmapped_area", "gs_agent_exit", "gs_hold_sweep")


def _dlopen_calls() -> str:
    out = BUILD_DIR / "dlopen_calls"
    src = ROOT / "tests" / "workloads" / "dlopen_calls.c"
    BUILD_DIR.mkdir(exist_ok=True)
    if not out.exists() or src.stat().st_mtime > out.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-o", str(out), str(src), "-ldl"], check=True)
    return str(out)


def _fresh_copy(i: int) -> str:
    d = BUILD_DIR / "late" / str(i)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    shutil.copy2(STANDIN_CUDART, d / STANDIN_CUDART.name)
    return str(d / STANDIN_CUDART.name)


def _workload(exe: str, lib: str) -> tuple[int, float]:
    t0 = time.monotonic()
    out = subprocess.run(["taskset", "-c", str(PRODUCER_CPU), exe, lib, str(CALLS)], capture_output=True, text=True)
    wall = time.monotonic() - t0
    pid = int(out.stdout.split()[1])
    return pid, wall


def _hold(reps: int) -> list[Result]:
    exe = _dlopen_calls()
    bare = [_workload(exe, _fresh_copy(100 + i))[1] for i in range(reps)]
    pin_to(CONSUMER_CPU)
    tracer = Tracer(TraceOptions(filter_targets=False, host=False, stacks=0, ring_bytes=8 << 20))
    watcher = LateLoads(tracer, Discovery())
    watcher.start()
    held, walls, short = [], [], 0
    try:
        for i in range(reps):
            pid, wall = _workload(exe, _fresh_copy(i))
            walls.append(wall)
            ev = tracer.read()
            got = int(((ev["pid"] == pid) & (ev["op"] == int(Op.cudaLaunchKernel))).sum())
            short += got != CALLS
            held += [ll.held_ms for ll in watcher.loads if ll.pid == pid and ll.held is HoldKind.STOPPED]
    finally:
        watcher.stop()
        tracer.close()
        unpin()
        shutil.rmtree(BUILD_DIR / "late", ignore_errors=True)
    note = f"{reps} loads, {len(held)} held; " + ("every call recorded" if not short else f"{short} runs short")
    return [
        Result("late_loads", "process held at a late load (median)", f"{median(held):.1f} ms", "", note),
        Result("late_loads", "process held at a late load (max)", f"{max(held):.1f} ms", "< 2000 ms bound"),
        Result(
            "late_loads",
            f"dlopen + {CALLS} calls, wall (bare / traced)",
            f"{median(bare) * 1e3:.1f} / {median(walls) * 1e3:.1f} ms",
        ),
    ]


def _mmap(reps: int) -> list[Result]:
    loop = build_c("mmaploop")
    obj = BpfObject(object_path("loads.bpf.o"))
    obj.set_const("filter_targets", 0)
    obj.set_const("self_tgid", os.getpid())
    obj.load()

    def once() -> tuple[float, float]:
        cmd = ["taskset", "-c", str(PRODUCER_CPU), str(loop), "100000", "/etc/passwd"]
        words = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
        return float(words[1]), float(words[3])

    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    try:
        for _ in range(reps):
            off.append(once())
            for prog in LOAD_PROGRAMS:
                obj.attach_auto(prog)
            on.append(once())
            obj.detach_all()
    finally:
        obj.close()
    rows = []
    for i, kind in enumerate(("anonymous", "file")):
        a, b = median([x[i] for x in off]), median([x[i] for x in on])
        rows.append(
            Result(
                "late_loads", f"mmap+munmap, {kind} (off / watching)", f"{a:.0f} / {b:.0f} ns", "", f"+{b - a:.0f} ns"
            )
        )
    return rows


def run(quick: bool = False) -> list[Result]:
    reps = 4 if quick else 10
    return _hold(reps) + _mmap(3 if quick else 7)
