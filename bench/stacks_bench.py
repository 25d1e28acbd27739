"""stacks_bench: added cost per traced call of stacks, off vs native vs native + Python, in one run.

    sudo .venv/bin/python bench/stacks_bench.py [--calls N] [--reps R]

A Python loop (ctypes into a private copy of the stand-in libcudart, five
Python frames deep, the way framework code reaches a CUDA call) times
``cudaStreamSynchronize``, a call the stack policy always stacks. Four
configurations run interleaved, repetition by repetition:

  none           no probes                          baseline ns/call
  off            gpuscope, --no-stack               the tracer alone
  native         gpuscope, native stacks            + bpf_get_stack (build id) + [sp] caller
  native+python  gpuscope, native + Python frames   + the in-kernel Python walk

Each traced run drains both rings and checks that every call produced an event
and (when on) a stack record. The figure is the median over repetitions of
each run's median ns/call over chunks of 1000 calls. The loop runs pinned to
one CPU, this process on the other.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchlib import CONSUMER_CPU, PRODUCER_CPU, STANDIN_CUDART, pin_to

from gpuscope.agent.discovery import Discovery
from gpuscope.agent.tracer import TraceOptions, Tracer
from gpuscope.model.ops import Op
from gpuscope.stacks.collector import StackCollector
from gpuscope.stacks.policy import stack_policy

LOOP = r"""
import ctypes, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[3])})
lib = ctypes.CDLL(sys.argv[1]); n = int(sys.argv[2])
sync = lib.cudaStreamSynchronize; sync.argtypes = [ctypes.c_void_p]; sync.restype = ctypes.c_int
def chunk():
    t = time.perf_counter_ns()
    for _ in range(1000):
        sync(None)
    return (time.perf_counter_ns() - t) / 1000
def l3(): return [chunk() for _ in range(n // 1000)]
def l2(): return l3()
def l1(): return l2()
print("ready", flush=True)
sys.stdin.readline()
for _ in range(5): sync(None)
res = l1(); res.sort()
print(res[len(res) // 2], flush=True)
"""
CONFIGS = {"none": None, "off": 0, "native": 1, "native+python": 2}


def _private_copy() -> str:
    dest = Path(__file__).resolve().parent / ".build" / "libs" / "stacks" / STANDIN_CUDART.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(STANDIN_CUDART.read_bytes())
    return str(dest)


def _one(lib: str, calls: int, mode: int | None) -> tuple[float, int, int]:
    """Run the loop under ``mode``; return (ns/call, events, stack records)."""
    tracer = None
    if mode is not None:
        opts = TraceOptions(filter_targets=True, host=False, stacks=mode, stack_policy=stack_policy())
        tracer = Tracer(opts)
        lib_obj = Discovery().add(lib, "bench")
        assert lib_obj is not None
        tracer.attach_library(lib_obj)
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, lib, str(calls), str(PRODUCER_CPU)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.readline()
    events = stacks = 0
    collector = None
    try:
        if tracer is not None:
            tracer.add_target(proc.pid)
            if mode:
                collector = StackCollector(0, tracer, python=mode >= 2)
                collector.note_process(proc.pid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        while proc.poll() is None or tracer is not None:
            if tracer is None:
                break
            ev = tracer.read()
            events += int((ev["op"] == int(Op.cudaStreamSynchronize)).sum())
            bodies = tracer.read_stacks()
            stacks += len(bodies)
            if proc.poll() is not None and not len(ev) and not bodies:
                break
        out = proc.communicate(timeout=300)[0]
    finally:
        if tracer is not None:
            tracer.close()
    return float(out.strip().splitlines()[-1]), events, stacks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("stacks_bench needs root (BPF)")
    pin_to(CONSUMER_CPU)
    lib = _private_copy()
    results: dict[str, list[float]] = {k: [] for k in CONFIGS}
    counts: dict[str, tuple[int, int]] = {}
    for _ in range(args.reps):
        for name, mode in CONFIGS.items():
            ns, events, stacks = _one(lib, args.calls, mode)
            results[name].append(ns)
            counts[name] = (events, stacks)
    base = statistics.median(results["none"])
    off = statistics.median(results["off"])
    print(
        f"stacks_bench: {args.calls} cudaStreamSynchronize calls from Python (ctypes), {args.reps} reps, "
        f"stand-in libcudart, kernel {os.uname().release}"
    )
    print(f"{'config':<15} {'ns/call':>9} {'added vs none':>14} {'added vs off':>13} {'events':>8} {'stacks':>8}")
    for name in CONFIGS:
        ns = statistics.median(results[name])
        ev, st = counts.get(name, (0, 0))
        print(f"{name:<15} {ns:>9.0f} {ns - base:>14.0f} {ns - off if name != 'none' else 0:>13.0f} {ev:>8} {st:>8}")


if __name__ == "__main__":
    main()
