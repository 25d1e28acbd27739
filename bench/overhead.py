"""overhead: added cost per traced call, against the bare uprobe floor on the same function.

Six configurations are measured in one run, interleaved repetition by
repetition so that drift (frequency, noisy neighbours) hits all of them alike:

  a  no probe                               baseline ns/call
  b  empty uprobe program                   floor, entry only
  c  empty uprobe + empty uretprobe         floor, entry + return
  d  gpuscope, entry-only (entry_only=1)    compared with b
  e  gpuscope, entry + return (default)     compared with c
  f  e with call stacks (the default stack policy; GPUSCOPE_BENCH_STACK_EVERY=N
     sets the per-site full-stack interval, 1 = a full stack on every call)

Every configuration attaches to every offset gpuscope's probe plan covers in
the library (one uprobe_multi link per direction), so only the programs
differ. The traced loop (bench/callloop.c) runs pinned to one CPU; this
process waits on the other, then drains the ring and checks that every call
made a record and none was dropped.

The libraries are measured through private copies (a new inode): uprobes
belong to an inode, so a trace another user runs on the shared copy would
otherwise fire in our loop too. The figure per run is the loop's median
chunk of 1000 calls (robust against other tasks taking the CPU); the mean is
reported beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchlib import (
    BUILD_DIR,
    CONSUMER_CPU,
    PRODUCER_CPU,
    REAL_CUDART,
    STANDIN_CUDART,
    Result,
    build_bench_bpf,
    build_c,
    median,
    pin_to,
    unpin,
    use_source_bpf,
)

from gpuscope.agent.discovery import CudaLibrary, Discovery, probe_plan
from gpuscope.agent.tracer import TraceOptions, Tracer
from gpuscope.bpf.loader import BpfObject
from gpuscope.model.ops import Op
from gpuscope.stacks.policy import DEFAULT_STACK_EVERY, stack_policy

CONFIGS = ("a", "b", "c", "d", "e", "f")
LABELS = {
    "a": "no probe",
    "b": "empty uprobe",
    "c": "empty uprobe+uretprobe",
    "d": "gpuscope entry-only",
    "e": "gpuscope entry+return",
    "f": "gpuscope entry+return with stacks",
}
TARGET_RATIO = 1.10


@dataclass(frozen=True, slots=True)
class Run:
    ns_per_call: float  # median chunk
    ns_mean: float
    records: int  # records of the called op read back from the ring (-1: no ring)
    expected: int
    dropped: int


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    library: CudaLibrary
    function: str
    offsets: list[int]
    cookies: list[int]


def _call_loop(exe: Path, target: Target, iters: int) -> tuple[float, float, int, int]:
    """Run the traced loop; return (median-chunk ns/call, mean ns/call, calls made incl. warm-up, pid)."""
    proc = subprocess.Popen(
        [str(exe), str(iters), target.library.path, target.function, str(PRODUCER_CPU)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    out, _ = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"callloop failed ({proc.returncode}): {out}")
    fields = dict(kv.split("=", 1) for kv in out.split())
    calls = int(fields["calls"]) + int(fields["warmup"])
    return float(fields["ns_per_call_p50"]), float(fields["ns_per_call"]), calls, proc.pid


def _run_empty(exe: Path, empty: BpfObject, target: Target, iters: int, ret: bool) -> Run:
    empty.attach_uprobe_multi("bench_empty_entry", target.library.path, target.offsets, target.cookies, retprobe=False)
    if ret:
        empty.attach_uprobe_multi(
            "bench_empty_return", target.library.path, target.offsets, target.cookies, retprobe=True
        )
    try:
        ns, mean, calls, _ = _call_loop(exe, target, iters)
    finally:
        empty.detach_all()
    return Run(ns, mean, -1, calls, 0)


def _stack_options() -> dict[str, object]:
    """TraceOptions for config f: native stacks (the loop is C) under the stack policy."""
    every = int(os.environ.get("GPUSCOPE_BENCH_STACK_EVERY", DEFAULT_STACK_EVERY))
    return {"stacks": 1, "stack_policy": stack_policy(every)}


def _run_gpuscope(exe: Path, target: Target, iters: int, entry_only: bool, stacks: bool = False) -> Run:
    # Unfiltered: the loop process becomes a target on its first call, as any
    # CUDA process would under `gpuscope trace` without --pid.
    extra = _stack_options() if stacks else {}
    tracer = Tracer(TraceOptions(filter_targets=False, entry_only=entry_only, host=False, **extra))  # type: ignore[arg-type]
    try:
        tracer.attach_library(target.library)
        ns, mean, calls, pid = _call_loop(exe, target, iters)
        tracer.detach()
        op = int(Op[target.function])
        records = 0
        while True:
            ev = tracer.read()
            if not len(ev):
                break
            records += int(((ev["pid"] == pid) & (ev["op"] == op)).sum())
        dropped = tracer.counters()["dropped"]
    finally:
        tracer.close()
    return Run(ns, mean, records, calls, dropped)


def _my_prog_ids() -> set[int]:
    """Ids of the BPF programs this process holds an fd of (from /proc/self/fdinfo)."""
    ids = set()
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            text = Path(f"/proc/self/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("prog_id:"):
                ids.add(int(line.split()[1]))
    return ids


def _prog_ns_per_run() -> dict[str, float]:
    """ns per run of each BPF program this process holds, from bpftool (needs bpf_stats)."""
    mine = _my_prog_ids()
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=False).stdout
    res: dict[str, float] = {}
    for prog in json.loads(out or "[]"):
        if prog.get("id") in mine and prog.get("run_cnt"):
            res[prog["name"]] = prog["run_time_ns"] / prog["run_cnt"]
    return res


def _prog_stats_rows(exe: Path, empty: BpfObject, target: Target, iters: int) -> list[Result]:
    """One extra, untimed pass per config with kernel.bpf_stats_enabled=1: time inside each program."""
    knob = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = knob.read_text().strip()
    knob.write_text("1")
    stats: dict[str, dict[str, float]] = {}
    try:
        for k, ret in (("b", False), ("c", True)):
            empty.attach_uprobe_multi(
                "bench_empty_entry", target.library.path, target.offsets, target.cookies, retprobe=False
            )
            if ret:
                empty.attach_uprobe_multi(
                    "bench_empty_return", target.library.path, target.offsets, target.cookies, retprobe=True
                )
            _call_loop(exe, target, iters)
            stats[k] = _prog_ns_per_run()
            empty.detach_all()
        for k, entry_only in (("d", True), ("e", False), ("f", False)):
            extra = _stack_options() if k == "f" else {}
            tracer = Tracer(TraceOptions(filter_targets=False, entry_only=entry_only, host=False, **extra))  # type: ignore[arg-type]
            try:
                tracer.attach_library(target.library)
                _call_loop(exe, target, iters)
                stats[k] = _prog_ns_per_run()
            finally:
                tracer.close()
    finally:
        knob.write_text(old)
    bench = f"overhead [{target.name} {target.function}]"
    rows = []
    for k, progs in stats.items():
        wanted = [n for n in progs if n.startswith("bench_empty" if k in ("b", "c") else "gs_cuda")]
        text = ", ".join(f"{n} {progs[n]:.0f} ns" for n in sorted(wanted))
        rows.append(Result(bench, f"{k} time in BPF programs", "", "", f"{text} per run (bpf_stats)"))
    return rows


def _private_copy(path: Path, name: str) -> Path:
    """Copy a library to bench/.build/libs/NAME/ (fresh inode, same file name)."""
    dest = BUILD_DIR / "libs" / name / path.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists() or dest.stat().st_size != path.stat().st_size:
        shutil.copyfile(path, dest)
    return dest


def _targets(function: str) -> list[Target]:
    disc = Discovery()
    out = []
    for name, path in (("stand-in", STANDIN_CUDART), ("real 12.x", REAL_CUDART)):
        if not path.is_file():
            continue
        lib = disc.add(str(_private_copy(path, name.split()[0])), "bench")
        if lib is None:
            continue
        plan = probe_plan(lib.path)
        out.append(Target(name, lib, function, [o for o, _, _ in plan], [int(op) for _, op, _ in plan]))
    return out


def run(quick: bool = False, function: str = "cudaLaunchKernel") -> list[Result]:
    """Measure all five configurations on the stand-in and the real libcudart."""
    note_src = use_source_bpf()
    exe = build_c("callloop", ["-ldl"])
    empty = BpfObject(build_bench_bpf("empty"))
    empty.set_uprobe_multi("bench_empty_entry")
    empty.set_uprobe_multi("bench_empty_return")
    empty.load()
    iters, reps = (50_000, 3) if quick else (200_000, 7)
    runners: dict[str, Callable[[Target], Run]] = {
        "a": lambda t: Run(*_call_loop(exe, t, iters)[:2], -1, 0, 0),
        "b": lambda t: _run_empty(exe, empty, t, iters, ret=False),
        "c": lambda t: _run_empty(exe, empty, t, iters, ret=True),
        "d": lambda t: _run_gpuscope(exe, t, iters, entry_only=True),
        "e": lambda t: _run_gpuscope(exe, t, iters, entry_only=False),
        "f": lambda t: _run_gpuscope(exe, t, iters, entry_only=False, stacks=True),
    }
    rows: list[Result] = []
    pin_to(CONSUMER_CPU)
    try:
        for target in _targets(function):
            runs: dict[str, list[Run]] = {k: [] for k in CONFIGS}
            for rep in range(reps):
                # Rotate the order every repetition: no config always runs first.
                order = CONFIGS[rep % len(CONFIGS) :] + CONFIGS[: rep % len(CONFIGS)]
                for k in order:
                    runs[k].append(runners[k](target))
            rows += _rows(target, runs, iters, reps)
            if os.environ.get("GPUSCOPE_BENCH_PROG_STATS") == "1":
                rows += _prog_stats_rows(exe, empty, target, iters)
    finally:
        empty.close()
        unpin()
    setup = f"{note_src}; {iters} calls x {reps} reps, median of reps of the median 1000-call chunk"
    rows.append(Result("overhead", "(setup)", "", "", setup))
    return rows


def _rows(target: Target, runs: dict[str, list[Run]], iters: int, reps: int) -> list[Result]:
    med = {k: median([r.ns_per_call for r in v]) for k, v in runs.items()}
    mean = {k: median([r.ns_mean for r in v]) for k, v in runs.items()}
    base = med["a"]
    bench = f"overhead [{target.name} {target.function}]"
    rows = [Result(bench, "a no probe", f"{base:.1f} ns/call", "", f"baseline; mean {mean['a']:.1f} ns")]
    for k in CONFIGS[1:]:
        note = f"mean +{mean[k] - mean['a']:.0f} ns"
        if k in ("d", "e", "f"):
            got = [r.records for r in runs[k]]
            want = [r.expected for r in runs[k]]
            drops = sum(r.dropped for r in runs[k])
            complete = "all records" if got == want else f"records {sum(got)}/{sum(want)}"
            note += f"; {complete}, {drops} dropped"
        rows.append(Result(bench, f"{k} {LABELS[k]}", f"+{med[k] - base:.0f} ns", "", note))
    for num, den, label in (("d", "b", "(d-a)/(b-a) entry-only"), ("e", "c", "(e-a)/(c-a) entry+return")):
        ratio = (med[num] - base) / max(med[den] - base, 1e-9)
        verdict = "ok" if ratio <= TARGET_RATIO else "MISSED"
        rows.append(Result(bench, label, f"{ratio:.2f}x", f"<= {TARGET_RATIO:.2f}x", verdict))
    return rows
