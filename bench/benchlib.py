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
    ROOT / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    / "site-packages" / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12"
)  # fmt: skip

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


def build_bpf(src: Path, out: Path) -> Path:
    """Compile one BPF C file with the project's flags and headers (when stale)."""
    inc = ROOT / "bpf" / "include"
    headers = sorted(inc.glob("*.h"))
    out.parent.mkdir(parents=True, exist_ok=True)
    if _stale(out, [src, *headers]):
        cmd = [_clang(), *BPF_CFLAGS, "-I", str(inc), "-I", str(inc / "vmlinux" / "x86"), "-c", str(src), "-o", str(out)]
        subprocess.run(cmd, check=True)
    return out


def build_bench_bpf(name: str) -> Path:
    """Compile bench/NAME.bpf.c into bench/.build/NAME.bpf.o."""
    return build_bpf(BENCH_DIR / f"{name}.bpf.c", BUILD_DIR / f"{name}.bpf.o")


def use_source_bpf() -> str:
    """Point gpuscope at BPF objects built from the current bpf/ sources.

    Sets GPUSCOPE_BPF_DIR (read by gpuscope.bpf.loader.object_path and
    inherited by `gpuscope trace` subprocesses). Falls back to the packaged
    objects when the sources do not compile (someone is mid-edit). Returns a
    note saying which objects the numbers come from.
    """
    out_dir = BUILD_DIR / "gpuscope_bpf"
    try:
        for name in ("cuda", "host"):
            build_bpf(ROOT / "bpf" / f"{name}.bpf.c", out_dir / f"{name}.bpf.o")
    except subprocess.CalledProcessError:
        os.environ.pop("GPUSCOPE_BPF_DIR", None)
        return "packaged BPF objects (bpf/ sources did not compile)"
    os.environ["GPUSCOPE_BPF_DIR"] = str(out_dir)
    return "BPF objects built from bpf/ sources"


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
