"""System readiness checks behind `gpuscope check`.

Every check tries the real thing where it can (load a program, attach a
tracepoint, create a uprobe_multi link) and carries a remedy for failure.
"""

from __future__ import annotations

import enum
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass

from gpuscope.agent.discovery import Discovery
from gpuscope.bpf import features
from gpuscope.errors import GpuscopeError
from gpuscope.platform.standin import STANDIN_DIR


class Status(enum.Enum):
    OK = "ok"
    WARN = "warn"  # tracing works, with a limitation
    FAIL = "fail"  # tracing cannot work
    INFO = "info"


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    remedy: str = ""

    def as_dict(self) -> dict[str, str]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


def check_kernel() -> CheckResult:
    v = features.kernel_version()
    text = f"{platform.release()} ({platform.machine()})"
    if v >= (6, 6):
        return CheckResult("kernel", Status.OK, text)
    if v >= (5, 15):
        return CheckResult(
            "kernel", Status.WARN, text + ": no uprobe_multi before 6.6", "upgrade to Linux 6.6+ for fast attach/detach"
        )
    return CheckResult("kernel", Status.FAIL, text + ": uprobe cookies need 5.15", "upgrade to Linux 5.15 or newer")


def check_btf() -> CheckResult:
    f = features.probe_btf()
    return CheckResult(
        "BTF",
        Status.OK if f.available else Status.FAIL,
        f.detail,
        "" if f.available else "use a kernel built with CONFIG_DEBUG_INFO_BTF=y",
    )


def check_libbpf() -> CheckResult:
    from gpuscope.bpf.libbpf import libbpf

    try:
        major, minor = libbpf().version()
    except GpuscopeError as exc:
        return CheckResult("libbpf", Status.FAIL, str(exc), "apt-get install libbpf1")
    if (major, minor) < (1, 1):
        return CheckResult("libbpf", Status.FAIL, f"{major}.{minor} is too old (need 1.1+)", "apt-get install libbpf1")
    return CheckResult("libbpf", Status.OK, f"{major}.{minor}")


def check_bpf_load() -> CheckResult:
    f = features.probe_bpf_load()
    if f.available:
        return CheckResult("BPF capability", Status.OK, f.detail)
    return CheckResult(
        "BPF capability",
        Status.FAIL,
        f.detail,
        "run as root or grant CAP_BPF and CAP_PERFMON (plus CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_KILL to trace other users' processes)",
    )


def check_probes() -> CheckResult:
    """Load gpuscope's own objects and attach the scheduler tracepoint once."""
    from gpuscope.agent.tracer import TraceOptions, Tracer

    try:
        t = Tracer(TraceOptions(ring_bytes=1 << 16, wakeups=False))
    except GpuscopeError as exc:
        return CheckResult("gpuscope probes", Status.FAIL, str(exc), exc.remedy)
    attached = ", ".join(t.host_links)
    t.close()
    return CheckResult("gpuscope probes", Status.OK, f"ring buffer, task storage; attached {attached}")


def check_late_loads() -> CheckResult:
    """Libraries mapped after start: reported by the kernel, and their process held until attached."""
    from gpuscope.agent.tracer import HOLD_MAX_S, TraceOptions, Tracer

    name = "late library loads"
    try:
        t = Tracer(TraceOptions(ring_bytes=1 << 16, host=False))
    except GpuscopeError as exc:
        return CheckResult(name, Status.FAIL, str(exc), exc.remedy)
    error = t.late_loads_error
    t.close()
    if error is not None:
        return CheckResult(
            name,
            Status.WARN,
            f"not reported ({error}): found by a once-a-second rescan, after their first calls",
            "Linux 6.13+ reports each library at its first mapping and holds the process until it is attached",
        )
    if not features.can_hold_processes():
        return CheckResult(
            name,
            Status.WARN,
            "reported at their first mapping, attached without holding the process: its first calls may be missed",
            "Linux 6.13+ (bpf_send_signal_task) lets gpuscope hold the process until the probes are attached",
        )
    return CheckResult(name, Status.OK, f"held at their first mapping until attached (at most {HOLD_MAX_S:g} s)")


def check_uprobe_multi() -> CheckResult:
    f = features.attach_uprobe_multi_link()
    if f.available:
        return CheckResult("uprobe_multi", Status.OK, f.detail)
    return CheckResult(
        "uprobe_multi",
        Status.WARN,
        f"unavailable ({f.detail}): falling back to classic uprobes",
        "classic uprobes take ~0.1 s each to detach; Linux 6.6+ attaches all symbols at once",
    )


def check_tracefs() -> CheckResult:
    for p in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.exists(os.path.join(p, "events")):
            return CheckResult("tracefs", Status.OK, p)
    return CheckResult(
        "tracefs",
        Status.INFO,
        "not mounted (not needed: BTF tracepoints and uprobe links do without)",
        "mount -t tracefs nodev /sys/kernel/tracing  # for bpftrace cross-checks",
    )


def check_cuda_libraries() -> list[CheckResult]:
    d = Discovery()
    d.scan_system()
    d.scan_all_processes()
    if not d.libraries:
        return [
            CheckResult(
                "CUDA libraries",
                Status.WARN,
                "no libcudart / libcuda found",
                "install the CUDA runtime, or pass --lib PATH to `gpuscope trace`",
            )
        ]
    return [
        CheckResult(f"CUDA {lib.kind}", Status.OK, f"{lib.path} {lib.version} ({lib.found_via})") for lib in d.libraries
    ]


def check_gpu() -> CheckResult:
    try:
        with open("/proc/driver/nvidia/version") as f:
            driver = f.readline().strip()
    except OSError:
        return CheckResult(
            "NVIDIA GPU",
            Status.INFO,
            "no NVIDIA driver loaded: a program that loads libcudart.so.12 by name runs on the stand-in "
            f"in {STANDIN_DIR} (`gpuscope trace --standin -- CMD`)",
        )
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.strip()
            if out:
                return CheckResult("NVIDIA GPU", Status.OK, out.replace("\n", "; "))
        except (OSError, subprocess.TimeoutExpired):
            pass
    return CheckResult("NVIDIA GPU", Status.OK, driver)


def check_ptrace_scope() -> CheckResult:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            v = int(f.read().strip())
    except (OSError, ValueError):
        return CheckResult("ptrace_scope", Status.INFO, "yama not present")
    if v >= 3:
        return CheckResult(
            "ptrace_scope",
            Status.WARN,
            f"{v}: Python frames cannot be read from other processes",
            "sysctl kernel.yama.ptrace_scope=1",
        )
    return CheckResult("ptrace_scope", Status.OK, str(v))


CHECKS: list[Callable[[], CheckResult | list[CheckResult]]] = [
    check_kernel,
    check_btf,
    check_libbpf,
    check_bpf_load,
    check_probes,
    check_late_loads,
    check_uprobe_multi,
    check_tracefs,
    check_cuda_libraries,
    check_gpu,
    check_ptrace_scope,
]


def run_checks() -> list[CheckResult]:
    out: list[CheckResult] = []
    for check in CHECKS:
        try:
            r = check()
        except GpuscopeError as exc:
            r = CheckResult(check.__name__.removeprefix("check_"), Status.FAIL, str(exc), exc.remedy)
        out.extend(r if isinstance(r, list) else [r])
    return out


def tracing_possible(results: list[CheckResult]) -> bool:
    return not any(r.status is Status.FAIL for r in results)
