"""Uprobe links in groups: which offsets single-step, and destroying many links at once."""

from __future__ import annotations

import threading

from gpuscope.bpf.calibration import Prologue, prologue_at
from gpuscope.bpf.loader import BpfObject, Link


def stepped_offsets(path: str, offsets: list[int]) -> set[int]:
    """The probed offsets whose first instruction the kernel single-steps (the costlier hit; all when unreadable)."""
    out = set()
    try:
        with open(path, "rb") as f:
            for off in offsets:
                f.seek(off)
                if prologue_at(f.read(2)) is Prologue.STEPPED:
                    out.add(off)
    except OSError:
        return set(offsets)
    return out


# Closing a uprobe link waits for RCU grace periods (16-76 ms a link measured
# on the 2-CPU VM, 4 uprobe_multi links 170 ms one after the other); links
# closed at the same time wait for the same grace periods.
DETACH_THREADS = 8


def destroy_together(links: list[tuple[BpfObject, Link]]) -> None:
    """Destroy links on up to ``DETACH_THREADS`` threads at once; return when all are gone."""
    if len(links) <= 1:
        for obj, link in links:
            link.destroy(obj.lib)
        return

    def destroy(group: list[tuple[BpfObject, Link]]) -> None:
        for obj, link in group:
            link.destroy(obj.lib)

    n = min(DETACH_THREADS, len(links))
    threads = [threading.Thread(target=destroy, args=(links[i::n],), name="gpuscope-detach") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def online_cpus() -> list[int]:
    """The CPUs the kernel has online (``/sys/devices/system/cpu/online``: "0-3,6"); CPU 0 when unreadable."""
    try:
        with open("/sys/devices/system/cpu/online") as f:
            text = f.read().strip()
    except OSError:
        return [0]
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out or [0]


def attach_cpu_sampler(obj: BpfObject, prog_name: str, hz: int) -> int:
    """Attach an on-CPU sampling program to a cpu-clock perf event on every online CPU; return how many.

    A CPU that refuses (gone offline meanwhile) is skipped; none at all raises the first CPU's error.
    """
    period_ns = 1_000_000_000 // hz
    attached, first_error = 0, None
    for cpu in online_cpus():
        try:
            fd = obj.lib.open_cpu_clock(cpu, period_ns)
        except OSError as exc:
            first_error = first_error or exc
            continue
        obj.attach_perf_event(prog_name, fd)
        attached += 1
    if not attached and first_error is not None:
        raise first_error
    return attached
