"""Load the probes, attach them to CUDA libraries, and read the ring buffer.

``Tracer`` owns the kernel side of a trace: two BPF objects (host tracepoints
and CUDA uprobes) that share one ring buffer, one target set and one counter
map. It knows nothing about storage.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from gpuscope.agent.discovery import CudaLibrary, probe_plan
from gpuscope.bpf.features import probe_uprobe_multi
from gpuscope.bpf.loader import BpfObject, Link, object_path, read_percpu_u64
from gpuscope.bpf.ringbuf import RingReader
from gpuscope.bpf.wire import DROP_STATS, STAT_SLOTS, Stat
from gpuscope.elf import function_offsets
from gpuscope.errors import BpfLoadError, ProcessNotFoundError
from gpuscope.model.ops import Op

HOST_PROGRAMS = {
    "gs_sched_switch": "sched_switch",
    "gs_sched_wakeup": "sched_wakeup",
    "gs_process_fork": "sched_process_fork",
    "gs_process_exec": "sched_process_exec",
    "gs_process_exit": "sched_process_exit",
}
SHARED_MAPS = ("events", "targets", "stats")


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """What to trace and how.

    filter_targets: only the given pids (and descendants); otherwise any
        process that calls a probed API becomes a target.
    entry_only: record calls at entry without durations (cheapest).
    """

    filter_targets: bool = True
    entry_only: bool = False
    host: bool = True
    wakeups: bool = True
    ring_bytes: int = 32 << 20
    force_classic_uprobes: bool = False


@dataclass
class AttachedLibrary:
    library: CudaLibrary
    ops: Counter[Op] = field(default_factory=Counter)
    links: list[Link] = field(default_factory=list)

    @property
    def probes(self) -> int:
        return sum(self.ops.values())


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


class Tracer:
    """Kernel-side state of one trace."""

    def __init__(self, opts: TraceOptions) -> None:
        self.opts = opts
        self.multi = not opts.force_classic_uprobes and probe_uprobe_multi().available
        self.attached: dict[tuple[int, int], AttachedLibrary] = {}
        self.host_links: list[str] = []
        self._host = BpfObject(object_path("host.bpf.o"))
        self._cuda: BpfObject | None = None
        self.ring: RingReader | None = None
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        o = self.opts
        host = self._host
        host.set_max_entries("events", o.ring_bytes)
        host.set_const("filter_targets", 1 if o.filter_targets else 0)
        host.set_const("trace_wakeups", 1 if o.wakeups else 0)
        if not o.host:
            for prog in HOST_PROGRAMS:
                if prog != "gs_process_fork":
                    host.disable(prog)
        host.load()
        cuda = BpfObject(object_path("cuda.bpf.o"))
        self._cuda = cuda
        for m in SHARED_MAPS:
            cuda.reuse_map(m, host.map_fd(m))
        cuda.set_const("filter_targets", 1 if o.filter_targets else 0)
        cuda.set_const("entry_only", 1 if o.entry_only else 0)
        if self.multi:
            cuda.set_uprobe_multi("gs_cuda_entry")
            cuda.set_uprobe_multi("gs_cuda_return")
        if o.entry_only:
            cuda.disable("gs_cuda_return")
        cuda.load()
        # The fork hook always runs: descendants of targets must become targets.
        for prog, tp in HOST_PROGRAMS.items():
            if o.host or prog == "gs_process_fork":
                host.attach_auto(prog)
                self.host_links.append(tp)
        self.ring = RingReader(host.map_fd("events"), o.ring_bytes)

    # -- targets -------------------------------------------------------------

    def add_target(self, pid: int) -> None:
        if not os.path.exists(f"/proc/{pid}"):
            raise ProcessNotFoundError(f"no process with pid {pid}")
        self._host.lib.map_update(self._host.map_fd("targets"), struct.pack("<I", pid), b"\x01")

    def is_target(self, pid: int) -> bool:
        return self._host.lib.map_lookup(self._host.map_fd("targets"), struct.pack("<I", pid), 1) is not None

    # -- uprobes -------------------------------------------------------------

    def attach_library(self, lib: CudaLibrary) -> AttachedLibrary | None:
        """Attach entry (and return) probes to every probed API in one library."""
        if lib.inode in self.attached or self._cuda is None:
            return None
        plan = probe_plan(lib.path)
        if not plan:
            return None
        cuda = self._cuda
        att = AttachedLibrary(lib)
        offsets = [off for off, _, _ in plan]
        cookies = [int(op) for _, op, _ in plan]
        directions = [False] if self.opts.entry_only else [False, True]
        for ret in directions:
            prog = "gs_cuda_return" if ret else "gs_cuda_entry"
            if self.multi:
                att.links.append(cuda.attach_uprobe_multi(prog, lib.path, offsets, cookies, retprobe=ret))
            else:
                for off, ck in zip(offsets, cookies, strict=True):
                    att.links.append(cuda.attach_uprobe(prog, lib.path, off, ck, retprobe=ret))
        att.ops.update(op for _, op, _ in plan)
        self.attached[lib.inode] = att
        return att

    # -- reading -------------------------------------------------------------

    def read(self, max_records: int = 1 << 18) -> np.ndarray:
        assert self.ring is not None
        return self.ring.read(max_records)

    def counters(self) -> dict[str, int]:
        """Kernel-side counters: submitted records and drops by source."""
        vals = read_percpu_u64(self._host.lib, self._host.map_fd("stats"), STAT_SLOTS)
        out = {s.name.lower(): vals[int(s)] for s in Stat}
        out["dropped"] = sum(vals[int(s)] for s in DROP_STATS)
        return out

    def detach(self) -> None:
        """Remove every probe; the ring keeps what was already submitted."""
        if self._cuda is not None:
            self._cuda.detach_all()
        self._host.detach_all()
        self.attached.clear()

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None
        self._host.close()
        self.attached.clear()
