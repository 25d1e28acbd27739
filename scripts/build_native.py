"""Compile the BPF objects and the stand-in CUDA libraries into the package.

Used by the wheel build hook and by `make native` in a development checkout.
The target is this machine's architecture, or GPUSCOPE_TARGET_ARCH
(x86_64 or aarch64): BPF objects for another architecture need only its
vendored vmlinux.h, the stand-in libraries a cross compiler (GPUSCOPE_CROSS_CC,
else Debian's, e.g. aarch64-linux-gnu-gcc). Another architecture's files go
to build/native/<arch>/gpuscope, never over this machine's in src/gpuscope.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

BPF_SOURCES = ["cuda", "host", "io", "net", "mem", "loads"]


@dataclass(frozen=True)
class Target:
    """An architecture the package is built for."""

    machine: str  # uname -m, and the wheel tag's architecture
    bpf_arch: str  # -D__TARGET_ARCH_<bpf_arch>, bpf/include/vmlinux/<bpf_arch>/
    cross_cc: str  # Debian's cross compiler for it
    cross_package: str


TARGETS = {
    "x86_64": Target("x86_64", "x86", "x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu"),
    "aarch64": Target("aarch64", "arm64", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
}
_ALIASES = {"amd64": "x86_64", "x86": "x86_64", "arm64": "aarch64"}


def target(name: str | None = None) -> Target:
    """The target named (or GPUSCOPE_TARGET_ARCH, or this machine's)."""
    name = name or os.environ.get("GPUSCOPE_TARGET_ARCH") or platform.machine()
    found = TARGETS.get(_ALIASES.get(name, name))
    if found is None:
        raise SystemExit(f"error: cannot build for architecture {name!r} (known: {', '.join(TARGETS)})")
    return found


def is_native(t: Target) -> bool:
    return t.machine == platform.machine()


def find_clang() -> str:
    candidates = [os.environ.get("BPF_CLANG", ""), "clang"] + [f"clang-{v}" for v in range(19, 13, -1)]
    for c in candidates:
        if c and shutil.which(c):
            return c
    raise SystemExit("error: clang is required to build the BPF programs (apt-get install clang llvm libbpf-dev)")


def find_strip() -> str | None:
    for c in ["llvm-strip"] + [f"llvm-strip-{v}" for v in range(19, 13, -1)]:
        if shutil.which(c):
            return c
    return None


def _stale(out: str, inputs: list[str]) -> bool:
    if not os.path.exists(out):
        return True
    mtime = os.path.getmtime(out)
    return any(os.path.getmtime(i) > mtime for i in inputs)


def build_bpf(root: str, out_dir: str, t: Target | None = None) -> list[str]:
    """Compile every program for ``t``; return the objects' paths."""
    arch = (t or target()).bpf_arch
    clang = find_clang()
    strip = find_strip()
    os.makedirs(out_dir, exist_ok=True)
    inc = os.path.join(root, "bpf", "include")
    vmlinux = os.path.join(inc, "vmlinux", arch, "vmlinux.h")
    if not os.path.exists(vmlinux):
        raise SystemExit(f"error: no {vmlinux} (scripts/gen_min_vmlinux.py --arch {arch} writes one)")
    headers = [os.path.join(inc, h) for h in os.listdir(inc) if h.endswith(".h")] + [vmlinux]
    built = []
    for name in BPF_SOURCES:
        src = os.path.join(root, "bpf", f"{name}.bpf.c")
        out = os.path.join(out_dir, f"{name}.bpf.o")
        built.append(out)
        if not _stale(out, [src, *headers]):
            continue
        cmd = [
            clang,
            "-g",
            "-O2",
            "-target",
            "bpf",
            f"-D__TARGET_ARCH_{arch}",
            "-I",
            inc,
            "-I",
            os.path.join(inc, "vmlinux", arch),
            "-Wall",
            "-Wno-unused-function",
            "-c",
            src,
            "-o",
            out,
        ]
        subprocess.run(cmd, check=True)
        if strip:
            # Drop DWARF (635 KB -> 17 KB); .BTF and .BTF.ext stay for CO-RE.
            subprocess.run([strip, "-g", out], check=True)
    return built


STANDINS = [
    # (source under native/, output soname file)
    ("standin/cudart_standin.c", "libcudart.so.12"),
    ("standin/cuda_standin.c", "libcuda.so.1"),
    ("standin/nccl_standin.c", "libnccl.so.2"),
    # Not a stand-in: the functions the agent times its own probes on (gpuscope.agent.calibration).
    ("calibrate/calibrate.c", "libgpuscope_calibrate.so"),
    # Not a stand-in: the writer's rows-from-a-blob SQLite extension (gpuscope.store.bulk_rows).
    ("sqlite_rows/sqlite_rows.c", "libgpuscope_sqlite_rows.so"),
]


def find_cc(t: Target) -> str:
    """The C compiler for ``t``'s shared libraries: CC or cc here, else GPUSCOPE_CROSS_CC or Debian's cross gcc."""
    if is_native(t):
        return os.environ.get("CC") or ("cc" if shutil.which("cc") else find_clang())
    cross = os.environ.get("GPUSCOPE_CROSS_CC") or t.cross_cc
    if shutil.which(shlex.split(cross)[0]):
        return cross
    raise SystemExit(
        f"error: building for {t.machine} needs a cross C compiler for the stand-in libraries\n"
        f"  fix: apt-get install {t.cross_package}, or set GPUSCOPE_CROSS_CC to a compiler for {t.machine}"
    )


def build_standins(root: str, out_dir: str, t: Target | None = None) -> list[str]:
    """Compile the stand-in libraries for ``t``; return their paths."""
    cc = find_cc(t or target())
    os.makedirs(out_dir, exist_ok=True)
    src_dir = os.path.join(root, "native")
    common = os.path.join(src_dir, "standin", "standin_common.h")
    built = []
    for src_name, lib in STANDINS:
        src = os.path.join(src_dir, src_name)
        out = os.path.join(out_dir, lib)
        built.append(out)
        if not _stale(out, [src, common]):
            continue
        subprocess.run(
            [
                *shlex.split(cc),
                "-shared",
                "-fPIC",
                "-O2",
                "-fno-omit-frame-pointer",
                f"-Wl,-soname,{lib}",
                "-o",
                out,
                src,
                # sqlite3ext.h: the same on every architecture; a cross compiler does not look in /usr/include
                "-idirafter",
                "/usr/include",
                # libdl stays a dependency where no symbol of this glibc's needs it: an older
                # glibc provides the stand-in's dlopen there (native/standin/cudart_standin.c)
                "-Wl,--no-as-needed",
                "-l:libdl.so.2",
                "-lpthread",
            ],
            check=True,
        )
    return built


def package_dir(root: str, t: Target) -> str:
    """Where ``t``'s native files go: the checkout's package for this machine, build/native/ for another."""
    if is_native(t):
        return os.path.join(root, "src", "gpuscope")
    return os.path.join(root, "build", "native", t.machine, "gpuscope")


def build_all(root: str, out_pkg: str, t: Target | None = None) -> list[str]:
    """Build everything native under ``out_pkg`` (_bpf/, _standin/); return the files' paths."""
    t = t or target()
    objects = build_bpf(root, os.path.join(out_pkg, "_bpf"), t)
    return objects + build_standins(root, os.path.join(out_pkg, "_standin"), t)


if __name__ == "__main__":
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    chosen = target()
    out = package_dir(here, chosen)
    build_all(here, out, chosen)
    print(f"native artifacts for {chosen.machine} built in {os.path.relpath(out, here)}", file=sys.stderr)
