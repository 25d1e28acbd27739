"""Drain the ``mem`` domain's per-process page-allocation counters, exactly.

The kernel counts into one of two generations (``page_gen``): a drain flips
the generation, waits out the programs still counting into the old one, then
reads and deletes its entries. ``gpuscope.agent.page_allocs`` turns the counts
into events.
"""

from __future__ import annotations

import struct
import time

from gpuscope.bpf.loader import BpfObject

# How long programs that read the old page-counter generation may still run.
_GEN_GRACE_S = 0.002


def drain_page_counters(mem: BpfObject, generation: int) -> dict[int, tuple[int, int]]:
    """Switch the counters to ``generation`` and drain the one before it: {pid: (allocations, bytes)}.

    pid 0 collects every process that is not a target.
    """
    lib = mem.lib
    old = (generation - 1) & 1
    lib.map_update(mem.map_fd("page_gen"), struct.pack("<I", 0), struct.pack("<I", generation & 1))
    time.sleep(_GEN_GRACE_S)
    fd = mem.map_fd("page_allocs")
    ncpu = int(lib.libbpf_num_possible_cpus())
    out: dict[int, tuple[int, int]] = {}
    for key in lib.map_keys(fd, 8):
        gen, pid = struct.unpack("<II", key)
        if gen != old:
            continue
        raw = lib.map_lookup(fd, key, 16 * ncpu)
        lib.map_delete(fd, key)
        if raw is None:
            continue
        vals = struct.unpack(f"<{2 * ncpu}Q", raw)
        out[pid] = (sum(vals[0::2]), sum(vals[1::2]))
    return out
