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
