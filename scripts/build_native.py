"""Compile the BPF objects and the stand-in CUDA libraries into the package.

Used by the wheel build hook and by `make native` in a development checkout.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

BPF_SOURCES = ["cuda", "host", "io", "net", "mem", "loads"]
_ARCH = {"x86_64": "x86", "aarch64": "arm64"}


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


def build_bpf(root: str, out_dir: str) -> None:
    arch = _ARCH.get(platform.machine())
    if arch is None:
        raise SystemExit(f"error: unsupported architecture {platform.machine()}")
    clang = find_clang()
    strip = find_strip()
    os.makedirs(out_dir, exist_ok=True)
    inc = os.path.join(root, "bpf", "include")
    headers = [os.path.join(inc, h) for h in os.listdir(inc) if h.endswith(".h")]
    for name in BPF_SOURCES:
        src = os.path.join(root, "bpf", f"{name}.bpf.c")
        out = os.path.join(out_dir, f"{name}.bpf.o")
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


STANDINS = [
    # (source, output soname file)
    ("cudart_standin.c", "libcudart.so.12"),
    ("cuda_standin.c", "libcuda.so.1"),
    ("nccl_standin.c", "libnccl.so.2"),
]


def build_standins(root: str, out_dir: str) -> None:
    cc = os.environ.get("CC") or ("cc" if shutil.which("cc") else find_clang())
    os.makedirs(out_dir, exist_ok=True)
    src_dir = os.path.join(root, "native", "standin")
    common = os.path.join(src_dir, "standin_common.h")
    for src_name, lib in STANDINS:
        src = os.path.join(src_dir, src_name)
        out = os.path.join(out_dir, lib)
        if not _stale(out, [src, common]):
            continue
        subprocess.run(
            [
                cc,
                "-shared",
                "-fPIC",
                "-O2",
                "-fno-omit-frame-pointer",
                f"-Wl,-soname,{lib}",
                "-o",
                out,
                src,
                "-ldl",
                "-lpthread",
            ],
            check=True,
        )


def build_all(root: str, out_pkg: str) -> None:
    build_bpf(root, os.path.join(out_pkg, "_bpf"))
    build_standins(root, os.path.join(out_pkg, "_standin"))


if __name__ == "__main__":
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build_all(here, os.path.join(here, "src", "gpuscope"))
    print("native artifacts built", file=sys.stderr)
