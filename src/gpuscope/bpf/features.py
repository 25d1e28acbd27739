"""Kernel feature probes, shared by `gpuscope check` and the test suite.

Each probe names the feature and the kernel that introduced it, and tries the
real thing (load and attach) instead of trusting uid or version strings.
"""

from __future__ import annotations

import errno
import os
import platform
import re
from dataclasses import dataclass
from functools import cache

from gpuscope.bpf.libbpf import BPF_PROG_TYPE_KPROBE, libbpf
from gpuscope.errors import BpfLoadError, GpuscopeError
from gpuscope.platform.elf import function_offsets


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_kernel: tuple[int, int]
    available: bool
    detail: str


def kernel_version() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def probe_btf() -> Feature:
    ok = os.path.exists("/sys/kernel/btf/vmlinux")
    return Feature("BTF", (5, 4), ok, "/sys/kernel/btf/vmlinux" if ok else "no /sys/kernel/btf/vmlinux")


def probe_bpf_load() -> Feature:
    """Load a kprobe-type program through libbpf's own prober (needs CAP_BPF)."""
    try:
        lib = libbpf()
    except GpuscopeError as exc:
        return Feature("BPF program load", (4, 1), False, str(exc))
    rc = int(lib.libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_KPROBE, None))
    if rc == 1:
        return Feature("BPF program load", (4, 1), True, "loaded a test program")
    if not may_load_bpf():
        # libbpf's prober answers "unsupported" (0) for EPERM too: without the capabilities, that is the truth.
        return Feature("BPF program load", (4, 1), False, "permission denied: needs root or CAP_BPF+CAP_PERFMON")
    return Feature(
        "BPF program load",
        (4, 1),
        False,
        f"kernel refused a test program ({os.strerror(-rc) if rc < 0 else 'unsupported'})",
    )


CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def effective_capabilities(status: str | None = None) -> int:
    """The CapEff bit mask of this process (``status``: the text of /proc/self/status, for tests)."""
    if status is None:
        try:
            with open("/proc/self/status") as f:
                status = f.read()
        except OSError:
            return 0
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status, flags=re.M)
    return int(m.group(1), 16) if m else 0


def may_load_bpf(caps: int | None = None) -> bool:
    """Whether this process holds what loading tracing programs takes: CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON."""
    caps = effective_capabilities() if caps is None else caps
    return bool(caps >> CAP_SYS_ADMIN & 1) or bool(caps >> CAP_BPF & 1 and caps >> CAP_PERFMON & 1)


def libc_probe_target() -> tuple[str, int]:
    """(path, offset) of a libc function, for feature probes."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if (len(parts) >= 6 and "/libc.so" in parts[5]) or (len(parts) >= 6 and "/libc-" in parts[5]):
                path = parts[5]
                offs = function_offsets(path)
                return path, offs["getpid"]
    raise BpfLoadError("libc not found in /proc/self/maps")


@cache
def probe_uprobe_multi() -> Feature:
    """Whether the kernel takes uprobe_multi links (6.6+), as libbpf itself probes it: in about a millisecond.

    A stub program of that attach type is loaded, and a link asked for on
    "/": a kernel that knows the link type gets as far as the path and says
    EBADF (not a regular file); one that does not says EINVAL. Nothing is
    attached, so nothing waits out a detach (the trace's start-up pays this).
    """
    name = "uprobe_multi links"
    lib = libbpf()
    try:
        fd = lib.load_uprobe_multi_stub()
    except OSError as exc:
        return Feature(name, (6, 6), False, f"a uprobe_multi program was refused: {exc.strerror}")
    try:
        link = lib.link_create_uprobe_multi(fd, "/", [0], [0], retprobe=False)
    except OSError as exc:
        if exc.errno == errno.EBADF:
            return Feature(name, (6, 6), True, "the kernel takes uprobe_multi links")
        return Feature(name, (6, 6), False, f"a uprobe_multi link was refused: {exc.strerror}")
    finally:
        os.close(fd)
    os.close(link)  # a kernel that attached to "/": it knows the link type
    return Feature(name, (6, 6), True, "the kernel takes uprobe_multi links")


@cache
def attach_uprobe_multi_link() -> Feature:
    """Attach a real uprobe_multi link to a libc function and detach it (for `gpuscope check`: slower, surer)."""
    from gpuscope.bpf.loader import BpfObject, object_path

    name = "uprobe_multi links"
    try:
        obj = BpfObject(object_path("cuda.bpf.o"))
    except GpuscopeError as exc:
        return Feature(name, (6, 6), False, str(exc))
    try:
        obj.set_uprobe_multi("gs_cuda_entry")
        obj.disable("gs_cuda_return")
        obj.load()
        path, off = libc_probe_target()
        link = obj.attach_uprobe_multi("gs_cuda_entry", path, [off], [0], retprobe=False)
        link.destroy(obj.lib)
        return Feature(name, (6, 6), True, "attached and detached a test link")
    except GpuscopeError as exc:
        return Feature(name, (6, 6), False, str(exc))
    finally:
        obj.close()


@cache
def kernel_has_kfuncs(names: tuple[str, ...]) -> bool:
    """Whether the running kernel's BTF names every one of ``names`` (kfuncs a program declares __weak).

    One read of /sys/kernel/btf/vmlinux (several MiB) for all of them.
    """
    try:
        with open("/sys/kernel/btf/vmlinux", "rb") as f:
            btf = f.read()
    except OSError:
        return False
    return all(b"\0" + name.encode() + b"\0" in btf for name in names)


def can_hold_processes() -> bool:
    """bpf/loads.bpf.c can stop a process and let it go from the kernel (Linux 6.13+)."""
    return kernel_has_kfuncs(("bpf_send_signal_task", "bpf_task_from_pid", "bpf_task_release"))
