"""startup: what `gpuscope trace -- CMD` adds to the wall time of CMD.

  in-process   Tracer(TraceOptions()) + attach_library(real libcudart) until
               it returns (probes live), then detach() + close()
  short        `gpuscope trace --no-tui -- true` as a subprocess: interpreter
               start, imports, library discovery, load, attach, launch, drain,
               detach, summary, exit. `true` exits at once: the wall time is
               all overhead (target <= 0.7 s).
  320k calls   `gpuscope trace --no-tui -- callloop 319000 <stand-in>`: 320,000
               cudaLaunchKernel calls (1,000 of them warm-up) on one pinned CPU.
               Overhead = wall - the loop's own time (calls x its mean ns per
               call, as it prints), so start-up plus the drain of what the
               agent is behind by when the loop ends (target <= 1.0 s).

Both end-to-end runs find their library by discovery (LD_LIBRARY_PATH names
its directory), as a user's trace would. The first repetition is reported
separately (cold caches: ELF symbol scan, BPF object files); the figure is
the median of the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from benchlib import (
    PRODUCER_CPU,
    PYTHON,
    REAL_CUDART,
    ROOT,
    STANDIN_CUDART,
    Result,
    build_c,
    cached_bytecode_env,
    median,
    use_source_bpf,
)

from gpuscope.agent.discovery import Discovery
from gpuscope.agent.tracer import TraceOptions, Tracer

TARGET_S = 1.0  # in-process attach and detach
SHORT_TARGET_S = 0.7  # `gpuscope trace -- true`
CALLS_TARGET_S = 1.0  # added to a command that makes 320k calls
LOOP_CALLS = 319_000  # + callloop's 1,000 warm-up calls = 320,000
RUN_TIMEOUT_S = 120


def _in_process(lib_path: Path) -> tuple[float, float, int]:
    """(seconds to ready, seconds to detach+close, probes attached)."""
    lib = Discovery().add(str(lib_path), "bench")
    if lib is None:
        raise RuntimeError(f"{lib_path} is not a probe-able CUDA library")
    t0 = time.perf_counter()
    tracer = Tracer(TraceOptions())
    try:
        att = tracer.attach_library(lib)
        t1 = time.perf_counter()
        probes = att.probes if att else 0
    except BaseException:
        tracer.close()
        raise
    t2 = time.perf_counter()
    tracer.detach()
    tracer.close()
    t3 = time.perf_counter()
    return t1 - t0, t3 - t2, probes


def _env(cached_bytecode: bool) -> dict[str, str]:
    """The environment as given, or with bytecode cached like an installed wheel (``cached_bytecode_env``)."""
    return cached_bytecode_env() if cached_bytecode else dict(os.environ)


def _trace(command: list[str], lib_dir: Path, db: Path, env: dict[str, str]) -> tuple[float, int, str, str]:
    """(wall seconds, exit status, stdout, last stderr line) of one `gpuscope trace --no-tui -- COMMAND`."""
    env = {**env, "LD_LIBRARY_PATH": str(lib_dir)}
    cmd = [PYTHON, "-m", "gpuscope", "trace", "--no-tui", "--db", str(db), "--", *command]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # The whole group: a traced command left stopped must not outlive the run.
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return time.perf_counter() - t0, -1, out, f"no end after {RUN_TIMEOUT_S} s, killed"
    wall = time.perf_counter() - t0
    tail = (err.strip().splitlines() or [""])[-1]
    return wall, proc.returncode, out, tail


def _loop_seconds(stdout: str) -> float:
    """The loop's own seconds, from callloop's line in the traced command's output."""
    line = next((ln for ln in stdout.splitlines() if ln.startswith("calls=")), None)
    if line is None:
        raise RuntimeError(f"callloop printed no result: {stdout[-300:]!r}")
    fields = dict(kv.split("=", 1) for kv in line.split())
    calls = int(fields["calls"]) + int(fields["warmup"])
    return calls * float(fields["ns_per_call"]) / 1e9


def _row(
    metric: str, samples: list[float], note: str = "", target_s: float = TARGET_S, at_most: bool = False
) -> Result:
    first, rest = samples[0], samples[1:] or samples
    value = median(rest)
    verdict = "ok" if (value <= target_s if at_most else value < target_s) else "MISSED"
    extra = f"{verdict}; first {first * 1e3:.0f} ms, max {max(rest) * 1e3:.0f} ms" + (f"; {note}" if note else "")
    sign = "<=" if at_most else "<"
    return Result("startup", metric, f"{value * 1e3:.0f} ms", f"{sign} {target_s * 1e3:.0f} ms", extra)


def _failures(bad: list[str]) -> str:
    return f"{len(bad)} runs failed ({bad[0]})" if bad else "all exit 0"


def run(quick: bool = False) -> list[Result]:
    """Time attach/detach in-process and `gpuscope trace` end to end on the real libcudart."""
    if not REAL_CUDART.is_file():
        raise RuntimeError(f"real libcudart not found at {REAL_CUDART} (pip install nvidia-cuda-runtime-cu12)")
    note_src = use_source_bpf()
    reps = 3 if quick else 6
    ready, teardown, probes = [], [], 0
    for _ in range(reps):
        r, t, probes = _in_process(REAL_CUDART)
        ready.append(r)
        teardown.append(t)
    rows = [
        _row("Tracer + attach -> ready", ready, f"{probes} probes, entry+return"),
        _row("detach + close", teardown),
    ]
    variants = [(True, "bytecode cached")]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        variants.append((False, "PYTHONDONTWRITEBYTECODE set: no .pyc"))
    loop = build_c("callloop", ["-ldl"])
    loop_cmd = [str(loop), str(LOOP_CALLS), str(STANDIN_CUDART), "cudaLaunchKernel", str(PRODUCER_CPU)]
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-", dir="/var/tmp") as tmp:
        for cached, label in variants:
            env = _env(cached)
            walls: list[float] = []
            bad: list[str] = []
            for i in range(reps):
                wall, rc, _, tail = _trace(["true"], REAL_CUDART.parent, Path(tmp) / f"true{i}.db", env)
                walls.append(wall)
                if rc != 0:
                    bad.append(f"exit {rc}: {tail}")
            rows.append(
                _row("gpuscope trace -- true (wall)", walls, f"{label}; {_failures(bad)}", SHORT_TARGET_S, True)
            )
            imports = [_import_time(env) for _ in range(reps)]
            rows.append(_row("  of which: python + imports", imports, f"{label}; until the probes start loading"))
            added: list[float] = []
            own: list[float] = []
            bad = []
            for i in range(reps):
                wall, rc, out, tail = _trace(loop_cmd, STANDIN_CUDART.parent, Path(tmp) / f"loop{i}.db", env)
                if rc != 0:
                    bad.append(f"exit {rc}: {tail}")
                    continue
                loop_s = _loop_seconds(out)
                own.append(loop_s)
                added.append(wall - loop_s)
            if added:
                note = f"{label}; loop itself {median(own) * 1e3:.0f} ms traced; {_failures(bad)}"
                rows.append(_row("gpuscope trace -- 320k calls (added)", added, note, CALLS_TARGET_S, True))
            else:
                rows.append(Result("startup", "gpuscope trace -- 320k calls (added)", "", "", _failures(bad)))
    setup = (
        f"{note_src}; {reps} reps, median after the first; {REAL_CUDART.name} from the nvidia-cuda-runtime-cu12 wheel"
        f"; the loop on CPU {PRODUCER_CPU} calls the stand-in libcudart"
    )
    rows.append(Result("startup", "(setup)", "", "", setup))
    return rows


def _import_time(env: dict[str, str]) -> float:
    # What `gpuscope trace` imports before the probes start loading; the rest
    # (the session, the live view) is imported while they load.
    t0 = time.perf_counter()
    code = "import gpuscope.cli as c, gpuscope.agent.tracer; c.build_parser('trace')"
    subprocess.run([PYTHON, "-c", code], check=True, cwd=ROOT, env=env)
    return time.perf_counter() - t0
