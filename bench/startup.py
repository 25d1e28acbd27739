"""startup: time to get every CUDA probe on the real libcudart attached, and to take them off.

  in-process   Tracer(TraceOptions()) + attach_library(real libcudart) until
               it returns (probes live), then detach() + close()
  end to end   `gpuscope trace --lib <real libcudart> --duration 0.5s -- true`
               as a subprocess: interpreter start, imports, load, attach,
               launch, drain, detach, summary. `true` exits at once, so the
               0.5 s limit is never reached: the wall time is all overhead.

The first repetition is reported separately (cold caches: ELF symbol scan,
BPF object files); the figure is the median of the rest.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchlib import BUILD_DIR, PYTHON, REAL_CUDART, ROOT, Result, median, use_source_bpf

from gpuscope.agent.discovery import Discovery
from gpuscope.agent.tracer import TraceOptions, Tracer

TARGET_S = 1.0


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
    """The environment as given, or with bytecode cached like an installed wheel.

    Cached: .pyc files go to bench/.build/pycache (PYTHONPYCACHEPREFIX), not
    into src/, even where PYTHONDONTWRITEBYTECODE is set.
    """
    env = dict(os.environ)
    if cached_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(BUILD_DIR / "pycache")
    return env


def _end_to_end(lib_path: Path, db: Path, env: dict[str, str]) -> tuple[float, int, str]:
    """(wall seconds, exit status, last stderr line) of one `gpuscope trace` run."""
    cmd = [
        PYTHON,
        "-m",
        "gpuscope",
        "trace",
        "--lib",
        str(lib_path),
        "--duration",
        "0.5s",
        "--db",
        str(db),
        "--",
        "true",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    wall = time.perf_counter() - t0
    tail = (proc.stderr.strip().splitlines() or [""])[-1]
    return wall, proc.returncode, tail


def _row(metric: str, samples: list[float], note: str = "") -> Result:
    first, rest = samples[0], samples[1:] or samples
    value = median(rest)
    verdict = "ok" if value < TARGET_S else "MISSED"
    extra = f"{verdict}; first {first * 1e3:.0f} ms, max {max(rest) * 1e3:.0f} ms" + (f"; {note}" if note else "")
    return Result("startup", metric, f"{value * 1e3:.0f} ms", f"< {TARGET_S * 1e3:.0f} ms", extra)


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
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-", dir="/var/tmp") as tmp:
        for cached, label in variants:
            env = _env(cached)
            walls: list[float] = []
            bad: list[str] = []
            for i in range(reps):
                wall, rc, tail = _end_to_end(REAL_CUDART, Path(tmp) / f"trace{i}.db", env)
                walls.append(wall)
                if rc != 0:
                    bad.append(f"exit {rc}: {tail}")
            note = f"{len(bad)} runs failed ({bad[0]})" if bad else "all exit 0"
            rows.append(_row("gpuscope trace -- true (wall)", walls, f"{label}; {note}"))
            imports = [_import_time(env) for _ in range(reps)]
            rows.append(_row("  of which: python + imports", imports, f"{label}; `gpuscope.cli.build_parser()`"))
    setup = (
        f"{note_src}; {reps} reps, median after the first; {REAL_CUDART.name} from the nvidia-cuda-runtime-cu12 wheel"
    )
    rows.append(Result("startup", "(setup)", "", "", setup))
    return rows


def _import_time(env: dict[str, str]) -> float:
    # gpuscope.cli builds its parser from every subcommand module: that is
    # what `gpuscope trace` imports before it starts.
    t0 = time.perf_counter()
    code = "import gpuscope.cli as c; c.build_parser()"
    subprocess.run([PYTHON, "-c", code], check=True, cwd=ROOT, env=env)
    return time.perf_counter() - t0
