"""vs_bpftrace: added cost per call of `gpuscope trace` against the bpftrace script a user would write.

One workload (bench/mixloop.c: 10,000 training-step-shaped iterations of
cudaMalloc, cudaMemcpy, 28 x cudaLaunchKernel, cudaStreamSynchronize,
cudaFree against a private copy of the stand-in libcudart whose calls take
0 ns; 320,100 calls with the warm-up) runs end to end, unpinned, as a user
would run it, in five configurations interleaved repetition by repetition:

  bare        the workload alone
  bpftrace    uprobe + uretprobe on every symbol gpuscope probes in the library,
              a start time per thread and an in-kernel histogram per function
  default     gpuscope trace -- CMD (stacks on, selective storage)
  no-stack    gpuscope trace --no-stack -- CMD
  record-all  gpuscope trace --record-all -- CMD

The figure is the workload's own loop time (it prints it, so a tool's
start-up and teardown are not in it): added us per call = (loop time traced
- bare) / calls, median over repetitions. The minimum is shown beside it:
on a shared machine other tasks only ever add time, and gpuscope's agent
needs CPU where bpftrace's does not, so its figures scatter more. End-to-end wall time of the whole
command and the CPU time of the tool plus workload are reported beside it.
Every gpuscope run is checked: the recording counts every call (exact
aggregates) and nothing was dropped; every bpftrace run: its histograms
count every call.

bpftrace comes from the distribution (`apt-get install bpftrace`; `make bench`
installs it). bpftrace 0.17 attaches uprobes through the perf PMU but detaches
them through tracefs: when /sys/kernel/tracing is not mounted, this bench
mounts it for the run (and unmounts it after) and says so.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import (
    BUILD_DIR,
    PYTHON,
    ROOT,
    STANDIN_CUDART,
    Result,
    build_c,
    cached_bytecode_env,
    median,
    use_source_bpf,
)

from gpuscope.agent.discovery import probe_plan

CONFIGS = ("bare", "bpftrace", "default", "no-stack", "record-all")
GPUSCOPE_FLAGS = {"default": [], "no-stack": ["--no-stack"], "record-all": ["--record-all"]}
# A second gpuscope to compare, run interleaved with the others as "MODE@base": a
# directory holding its source tree (src/) and its BPF objects (bpf_obj/).
BASELINE_ENV = "GPUSCOPE_BENCH_BASELINE"
TRACEFS = Path("/sys/kernel/tracing")
STEPS = 10_000
INSTALL_HINT = "bpftrace not found: install it with `sudo apt-get install bpftrace` (or `make bench`)"


@dataclass(frozen=True, slots=True)
class Run:
    loop_ns: int  # the workload's timed loop
    calls: int  # calls made, warm-up included
    wall_s: float  # the whole command, tool start-up and teardown included
    cpu_s: float  # user + system CPU of the command and its children
    counted: int  # calls the tool counted (-1: bare)
    dropped: int


def bpftrace_script(lib: Path, symbols: list[str]) -> str:
    """The script a user would write: entry time per thread, a latency histogram per function."""
    entry = ",\n".join(f"uprobe:{lib}:{s}" for s in symbols)
    ret = ",\n".join(f"uretprobe:{lib}:{s}" for s in symbols)
    # `func` names the caller's address in a uretprobe under bpftrace 0.17; `probe` names the function.
    return (
        f"{entry}\n{{ @start[tid] = nsecs; }}\n\n"
        f"{ret}\n{{ @h[probe] = hist(nsecs - @start[tid]); delete(@start[tid]); }}\n"
    )


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[str, str, float, float]:
    """Run a command; return stdout, stderr, wall seconds and its children's CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=300)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return proc.stdout, proc.stderr, wall, cpu


def _loop(stdout: str) -> tuple[int, int]:
    m = re.search(r"calls=(\d+) warmup=(\d+) loop_ns=(\d+)", stdout)
    if m is None:
        raise RuntimeError(f"the workload printed no timing: {stdout.strip()[-200:]}")
    return int(m[3]), int(m[1]) + int(m[2])


def _hist_total(text: str) -> int:
    """Sum of every bucket of bpftrace's printed histograms."""
    return sum(int(m[1]) for m in re.finditer(r"^[\[(][^\]\n]*[\])]\s+(\d+) \|", text, re.M))


def _run_bare(exe: Path, lib: Path) -> Run:
    out, _, wall, cpu = _timed([str(exe), str(STEPS), str(lib)], {"PATH": "/usr/bin:/bin"})
    loop, calls = _loop(out)
    return Run(loop, calls, wall, cpu, -1, 0)


def _run_bpftrace(exe: Path, lib: Path, script: Path) -> Run:
    out, _, wall, cpu = _timed(["bpftrace", "-c", f"{exe} {STEPS} {lib}", str(script)])
    loop, calls = _loop(out)
    return Run(loop, calls, wall, cpu, _hist_total(out), 0)


def _gpuscope_env(baseline: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if baseline is not None:
        env["PYTHONPATH"] = str(baseline / "src")
        env["GPUSCOPE_BPF_DIR"] = str(baseline / "bpf_obj")
    # Bytecode cached as an installed wheel has it (only the end-to-end wall depends on it).
    return cached_bytecode_env(env)


def _run_gpuscope(exe: Path, lib: Path, flags: list[str], db: Path, baseline: Path | None = None) -> Run:
    for p in db.parent.glob(db.name + "*"):
        p.unlink()
    cmd = [PYTHON, "-m", "gpuscope", "trace", "--no-tui", *flags, "--lib", str(lib), "--db", str(db)]
    out, _, wall, cpu = _timed([*cmd, "--", str(exe), str(STEPS), str(lib)], _gpuscope_env(baseline))
    loop, calls = _loop(out)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (counted,) = conn.execute("SELECT coalesce(sum(count), 0) FROM event_aggregates WHERE op_id < 64").fetchone()
        (dropped,) = conn.execute("SELECT coalesce(sum(events_dropped), 0) FROM sessions").fetchone()
    conn.close()
    for p in db.parent.glob(db.name + "*"):
        p.unlink()
    return Run(loop, calls, wall, cpu, int(counted), int(dropped))


def _mount_tracefs() -> bool:
    """Mount tracefs when it is not: bpftrace 0.17 needs it to detach uprobes. True when mounted here."""
    if (TRACEFS / "uprobe_events").exists():
        return False
    subprocess.run(["mount", "-t", "tracefs", "tracefs", str(TRACEFS)], check=True)
    return True


def run(quick: bool = False) -> list[Result]:
    """Run the five configurations interleaved; report added us per call and the ratios to bpftrace."""
    if shutil.which("bpftrace") is None:
        raise RuntimeError(INSTALL_HINT)
    note_src = use_source_bpf()
    exe = build_c("mixloop", ["-ldl"])
    lib = BUILD_DIR / "libs" / "e2e" / STANDIN_CUDART.name
    lib.parent.mkdir(parents=True, exist_ok=True)
    # A private copy (its own inode): other users' probes on the shared copy must not fire here.
    shutil.copyfile(STANDIN_CUDART, lib)
    symbols = sorted({name for _, _, name in probe_plan(str(lib))})
    script = BUILD_DIR / "vs_bpftrace.bt"
    script.write_text(bpftrace_script(lib, symbols))
    db = BUILD_DIR / "vs_bpftrace.db"
    mounted = _mount_tracefs()
    reps = 2 if quick else 5
    base = Path(os.environ[BASELINE_ENV]).resolve() if os.environ.get(BASELINE_ENV) else None
    configs = CONFIGS + (tuple(f"{k}@base" for k in GPUSCOPE_FLAGS) if base else ())
    runs: dict[str, list[Run]] = {k: [] for k in configs}
    try:
        for rep in range(reps):
            order = configs[rep % len(configs) :] + configs[: rep % len(configs)]
            for k in order:
                if k == "bare":
                    runs[k].append(_run_bare(exe, lib))
                elif k == "bpftrace":
                    runs[k].append(_run_bpftrace(exe, lib, script))
                else:
                    mode, _, at = k.partition("@")
                    runs[k].append(_run_gpuscope(exe, lib, GPUSCOPE_FLAGS[mode], db, base if at else None))
    finally:
        if mounted:
            subprocess.run(["umount", str(TRACEFS)], check=False)
    rows = _rows(runs, len(symbols))
    setup = (
        f"{note_src}; {runs['bare'][0].calls} calls x {reps} reps, median; "
        f"{len(symbols)} symbols, {2 * len(symbols)} bpftrace probes"
        + ("; tracefs mounted for bpftrace and unmounted after" if mounted else "")
        + (f"; @base: {base}" if base else "")
    )
    rows.append(Result("vs_bpftrace", "(setup)", "", "", setup))
    return rows


def _rows(runs: dict[str, list[Run]], nsyms: int) -> list[Result]:
    calls = runs["bare"][0].calls
    loop = {k: median([r.loop_ns for r in v]) for k, v in runs.items()}
    wall = {k: median([r.wall_s for r in v]) for k, v in runs.items()}
    cpu = {k: median([r.cpu_s for r in v]) for k, v in runs.items()}
    added = {k: (loop[k] - loop["bare"]) / calls / 1000 for k in runs}
    bench = "vs_bpftrace [stand-in, 0-ns calls]"
    rows = [
        Result(
            bench,
            "bare",
            f"{loop['bare'] / calls:.1f} ns/call",
            "",
            f"wall {wall['bare']:.2f} s, cpu {cpu['bare']:.2f} s",
        )
    ]
    for k in list(runs)[1:]:
        got = [r.counted for r in runs[k]]
        complete = "every call counted" if all(r.counted == r.calls for r in runs[k]) else f"counted {got}"
        drops = sum(r.dropped for r in runs[k])
        note = (
            f"wall {wall[k]:.2f} s (+{wall[k] - wall['bare']:.2f}), cpu {cpu[k]:.2f} s; {complete}"
            + (f", {drops} dropped" if k != "bpftrace" else "")
            + f"; min +{(min(r.loop_ns for r in runs[k]) - loop['bare']) / calls / 1000:.2f} us; runs "
            + ", ".join(f"{(r.loop_ns - loop['bare']) / r.calls / 1000:.2f}" for r in runs[k])
        )
        rows.append(Result(bench, f"{k} added per call", f"+{added[k]:.2f} us", "", note))
    for k in [k for k in runs if k.partition("@")[0] in GPUSCOPE_FLAGS]:
        ratio = added[k] / max(added["bpftrace"], 1e-9)
        target = "<= 1.00x" if k == "default" else ""
        verdict = ("ok" if ratio <= 1.0 else "MISSED") if k == "default" else ""
        rows.append(Result(bench, f"{k} / bpftrace", f"{ratio:.2f}x", target, verdict))
    return rows
