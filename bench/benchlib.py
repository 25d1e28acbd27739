"""Shared pieces of the benchmarks: building helpers, CPU pinning, result rows, the table."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
BUILD_DIR = BENCH_DIR / ".build"
PYTHON = sys.executable

STANDIN_CUDART = ROOT / "src" / "gpuscope" / "_standin" / "libcudart.so.12"
REAL_CUDART = (
    ROOT
    / ".venv"
    / "lib"
    / f"python{sys.version_info.major}.{sys.version_info.minor}"
    / "site-packages"
    / "nvidia"
    / "cuda_runtime"
    / "lib"
    / "libcudart.so.12"
)

# The producer side of a benchmark (traced loop, paced generator) runs on one
# CPU and the Python consumer on the other: the VM has two.
CONSUMER_CPU = 0
PRODUCER_CPU = 1 if (os.cpu_count() or 1) > 1 else 0

BPF_CFLAGS = ["-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86", "-Wall", "-Wno-unused-function"]


@dataclass(frozen=True, slots=True)
class Result:
    """One line of the table."""

    bench: str
    metric: str
    value: str
    target: str = ""
    note: str = ""


def pin_to(cpu: int) -> None:
    """Pin the calling thread (and threads it starts later) to one CPU."""
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        pass


def unpin() -> None:
    try:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    except OSError:
        pass


def _clang() -> str:
    for c in [os.environ.get("BPF_CLANG", ""), "clang"] + [f"clang-{v}" for v in range(19, 13, -1)]:
        if c and shutil.which(c):
            return c
    raise SystemExit("bench: clang is required to build the benchmark BPF programs")


def _stale(out: Path, inputs: Sequence[Path]) -> bool:
    return not out.exists() or any(i.stat().st_mtime > out.stat().st_mtime for i in inputs)


def build_c(name: str, extra: Sequence[str] = ()) -> Path:
    """Compile bench/NAME.c into bench/.build/NAME (when stale) and return its path."""
    src, out = BENCH_DIR / f"{name}.c", BUILD_DIR / name
    BUILD_DIR.mkdir(exist_ok=True)
    if _stale(out, [src]):
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(out), str(src), *extra], check=True)
    return out


def build_hammer() -> Path:
    """tests/workloads/cuda_hammer.c linked against the stand-in libcudart (when stale)."""
    src, out = ROOT / "tests" / "workloads" / "cuda_hammer.c", BUILD_DIR / "cuda_hammer"
    BUILD_DIR.mkdir(exist_ok=True)
    if _stale(out, [src, STANDIN_CUDART]):
        lib_dir = str(STANDIN_CUDART.parent)
        link = [f"-L{lib_dir}", "-l:libcudart.so.12", f"-Wl,-rpath,{lib_dir}", "-lpthread"]
        subprocess.run(["cc", "-O2", "-o", str(out), str(src), *link], check=True)
    return out


def build_bpf(src: Path, out: Path, include_first: Path | None = None) -> Path:
    """Compile one BPF C file with the project's flags and headers (when stale).

    include_first: a directory searched before bpf/include (another events.h).
    """
    inc = ROOT / "bpf" / "include"
    first = [include_first] if include_first else []
    headers = [h for d in [*first, inc] for h in sorted(d.glob("*.h"))]
    out.parent.mkdir(parents=True, exist_ok=True)
    if _stale(out, [src, *headers]) or include_first:
        incs = [a for d in [*first, inc, inc / "vmlinux" / "x86"] for a in ("-I", str(d))]
        subprocess.run([_clang(), *BPF_CFLAGS, *incs, "-c", str(src), "-o", str(out)], check=True)
    return out


def build_bench_bpf(name: str, include_first: Path | None = None) -> Path:
    """Compile bench/NAME.bpf.c into bench/.build/NAME.bpf.o."""
    return build_bpf(BENCH_DIR / f"{name}.bpf.c", BUILD_DIR / f"{name}.bpf.o", include_first)


def header_event_size(include_dir: Path) -> int:
    """sizeof(struct gs_event) as INCLUDE_DIR/events.h declares it."""
    BUILD_DIR.mkdir(exist_ok=True)
    src = BUILD_DIR / "event_size.c"
    src.write_text(
        '#include <stdio.h>\n#include "events.h"\nint main(void){printf("%zu\\n", sizeof(struct gs_event));}\n'
    )
    exe = BUILD_DIR / "event_size"
    subprocess.run(["cc", "-I", str(include_dir), "-o", str(exe), str(src)], check=True)
    return int(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout)


def wire_mismatch() -> str:
    """Empty when bpf/include/events.h and the Python mirror agree; else what differs.

    The header and gpuscope.bpf.wire are edited in separate steps: between
    them, objects built from bpf/ write records the reader cannot decode.
    """
    from gpuscope.bpf.wire import EVENT_SIZE

    size = header_event_size(ROOT / "bpf" / "include")
    if size == EVENT_SIZE:
        return ""
    return f"bpf/include/events.h says {size} B per event, gpuscope.bpf.wire {EVENT_SIZE} B"


def events_include_for_wire() -> tuple[Path, str]:
    """An include dir whose events.h matches the Python mirror, and a note.

    The working tree's header when it agrees, else the committed one (HEAD)
    when that agrees. Raises RuntimeError when neither does.
    """
    mismatch = wire_mismatch()
    if not mismatch:
        return ROOT / "bpf" / "include", ""
    from gpuscope.bpf.wire import EVENT_SIZE

    head_dir = BUILD_DIR / "head_include"
    head_dir.mkdir(parents=True, exist_ok=True)
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", "HEAD:bpf/include/events.h"], capture_output=True, text=True, check=False
    ).stdout
    if text:
        (head_dir / "events.h").write_text(text)
        if header_event_size(head_dir) == EVENT_SIZE:
            return head_dir, f"events.h from HEAD ({mismatch})"
    raise RuntimeError(f"cannot build a producer the reader can decode: {mismatch}")


def use_source_bpf() -> str:
    """Point gpuscope at BPF objects built from the current bpf/ sources.

    Sets GPUSCOPE_BPF_DIR (read by gpuscope.bpf.loader.object_path and
    inherited by `gpuscope trace` subprocesses). Falls back to the packaged
    objects when the sources do not compile (someone is mid-edit). Returns a
    note saying which objects the numbers come from.
    """
    out_dir = BUILD_DIR / "gpuscope_bpf"
    mismatch = wire_mismatch()
    if mismatch:
        os.environ.pop("GPUSCOPE_BPF_DIR", None)
        return f"packaged BPF objects ({mismatch})"
    try:
        for src in sorted((ROOT / "bpf").glob("*.bpf.c")):
            build_bpf(src, out_dir / src.name.replace(".bpf.c", ".bpf.o"))
    except subprocess.CalledProcessError:
        os.environ.pop("GPUSCOPE_BPF_DIR", None)
        return "packaged BPF objects (bpf/ sources did not compile)"
    os.environ["GPUSCOPE_BPF_DIR"] = str(out_dir)
    return "BPF objects built from bpf/ sources"


def cached_bytecode_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with bytecode cached as an installed wheel has it.

    The .pyc files go to bench/.build/pycache (PYTHONPYCACHEPREFIX), not into
    src/, even where PYTHONDONTWRITEBYTECODE is set: start-up times then
    measure imports as users pay them, not compiling every module.
    """
    out = dict(os.environ if env is None else env)
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    out["PYTHONPYCACHEPREFIX"] = str(BUILD_DIR / "pycache")
    return out


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def fmt_rate(events_per_s: float) -> str:
    if events_per_s >= 1e6:
        return f"{events_per_s / 1e6:.2f} M/s"
    return f"{events_per_s / 1e3:.0f} k/s"


def render_table(rows: Sequence[Result]) -> str:
    """Plain fixed-width table, one line per result."""
    head = Result("bench", "metric", "value", "target", "note")
    cols = [
        max(len(r.bench) for r in [head, *rows]),
        max(len(r.metric) for r in [head, *rows]),
        max(len(r.value) for r in [head, *rows]),
        max(len(r.target) for r in [head, *rows]),
    ]

    def line(r: Result) -> str:
        return (
            f"{r.bench:<{cols[0]}}  {r.metric:<{cols[1]}}  {r.value:>{cols[2]}}  {r.target:<{cols[3]}}  {r.note}"
        ).rstrip()

    sep = "  ".join("-" * c for c in cols) + "  ----"
    return "\n".join([line(head), sep, *(line(r) for r in rows)])
