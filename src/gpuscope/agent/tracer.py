"""Load the probes, attach them to CUDA libraries, and read the ring buffer.

``Tracer`` owns the kernel side of a trace: two BPF objects (host tracepoints
and CUDA uprobes) that share one ring buffer, one target set and one counter
map. It knows nothing about storage.
"""

from __future__ import annotations

import enum
import os
import signal
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from gpuscope.agent.background import Background
from gpuscope.agent.discovery import CudaLibrary, probe_plan
from gpuscope.agent.links import attach_cpu_sampler, destroy_together, stepped_offsets
from gpuscope.agent.options import TraceOptions as TraceOptions  # re-exported: callers import it from here
from gpuscope.agent.page_counters import drain_page_counters
from gpuscope.agent.probe_setup import (
    AUX_RING_BYTES,
    HOST_DOMAINS,
    HOST_PROGRAMS,
    LOAD_PROGRAMS,
    LOAD_RING_BYTES,
    STACK_RING_BYTES,
    configure_cuda,
    configure_domain,
    configure_host,
    configure_late_loads,
)
from gpuscope.agent.python_maps import PythonMaps
from gpuscope.agent.uprobes import attach_calibration_uprobes, attach_uprobes
from gpuscope.bpf.features import probe_uprobe_multi
from gpuscope.bpf.loader import BpfObject, Link, object_path, read_percpu_u64
from gpuscope.bpf.ringbuf import AuxReader, AuxRecord, RingReader, VarReader
from gpuscope.bpf.wire import (
    COOKIE_SAMPLED,
    COOKIE_STEPPED,
    DROP_STATS,
    LOAD_EVENT_DTYPE,
    STAT_SLOTS,
    Stat,
)
from gpuscope.errors import BpfLoadError, PermissionDeniedError, ProcessNotFoundError
from gpuscope.model.ops import Op
from gpuscope.model.policy import SAMPLED_PROBE_OPS
from gpuscope.platform.proc_root import kernel_file_key as kernel_file_key  # re-exported: callers import it here

# The longest the kernel keeps a process stopped at a late library load, even
# when the agent cannot run (attaching takes milliseconds).
HOLD_MAX_S = 2.0


class LibState(enum.IntEnum):
    """What the kernel's ``lib_state`` map says of a library file (enum gs_lib_state)."""

    PROBED = 1
    NOT_PROBED = 2  # not a library gpuscope probes (no probed symbol, unreadable)


@dataclass
class AttachedLibrary:
    library: CudaLibrary
    ops: Counter[Op] = field(default_factory=Counter)
    links: list[Link] = field(default_factory=list)
    # The sampled ops' probes (attached in windows, gpuscope.agent.sampling): where, and their links while attached.
    sampled_offsets: list[int] = field(default_factory=list)
    sampled_cookies: list[int] = field(default_factory=list)
    sampled_links: list[Link] = field(default_factory=list)

    @property
    def probes(self) -> int:
        return sum(self.ops.values())


class Tracer(PythonMaps):
    """Kernel-side state of one trace."""

    def __init__(self, opts: TraceOptions) -> None:
        self.opts = opts
        self.multi = not opts.force_classic_uprobes and probe_uprobe_multi().available
        # Windows need links that attach and detach in milliseconds: one uprobe_multi link per library.
        # Classic uprobes (kernels before 6.6) take ~100 ms each to detach, so there every call is probed.
        self.samples = opts.sampled_probes and self.multi
        self.attached: dict[tuple[int, int], AttachedLibrary] = {}
        self.host_links: list[str] = []
        self._host = BpfObject(object_path("host.bpf.o"))
        self._cuda: BpfObject | None = None
        self._domains: dict[str, BpfObject] = {}
        self.ring: RingReader | None = None
        self.aux: AuxReader | None = None
        self.stack_ring: VarReader | None = None
        self._loads: BpfObject | None = None
        self._python_exes: set[bytes] = set()
        self._python_libs: list[str] = []
        # Why libraries mapped after start are not reported (None: they are).
        self.late_loads_error: str | None = None if opts.late_loads else "off"
        self.load_ring: VarReader | None = None
        # attach_library runs on the main thread and on the late-load watcher.
        self._attach_lock = threading.Lock()
        # counters() may be called from other threads (the metrics exporter): after close() the maps are
        # freed, and it answers with the last values read instead of touching them.
        self._counters_lock = threading.Lock()
        self._last_counters: dict[str, int] = {}
        self._host_closed = False
        self._page_gen = 0
        # Whether the sampled ops' probes are attached now: from the start (the first seconds are probed
        # whole), with their gate open once loaded; gpuscope.agent.sampling takes over from there.
        self.sampled_attached = True
        # On-CPU sampling: the rate taken (0: none) and why none where it was asked for.
        self.cpu_sample_hz = 0
        self.cpu_sampling_error: str | None = None
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        o = self.opts
        host = self._host
        configure_host(host, o)
        host.load()
        cuda = BpfObject(object_path("cuda.bpf.o"))
        self._cuda = cuda
        configure_cuda(cuda, host, o, multi=self.multi)
        # The verifier takes ~120 ms over this object and ~100 ms over the
        # others together, in the kernel (ctypes lets go of the GIL): they
        # load side by side.
        cuda_loading = Background(cuda.load, name="gpuscope-load-cuda")
        try:
            self._load_host_domains(host)
        finally:
            cuda_loading.wait()
        cuda_loading.result()
        if o.stacks:
            fd = cuda.map_fd("stack_policy")
            for op, every in o.stack_policy:
                cuda.lib.map_update(fd, struct.pack("<I", op), struct.pack("<I", every))
            self.stack_ring = VarReader(cuda.map_fd("stack_events"), STACK_RING_BYTES)
            if o.cpu_sample_hz > 0:
                self._sample_cpus(cuda, o.cpu_sample_hz)
        self.ring = RingReader(host.map_fd("events"), o.ring_bytes)
        self.aux = AuxReader(host.map_fd("aux_events"), AUX_RING_BYTES)
        if self.samples:
            self.set_sample_gate(True)

    def _sample_cpus(self, cuda: BpfObject, hz: int) -> None:
        """Start the on-CPU sampler; a kernel or container that refuses perf events leaves the trace without it."""
        try:
            attach_cpu_sampler(cuda, "gs_cpu_sample", hz)
        except (OSError, BpfLoadError, PermissionDeniedError) as exc:
            self.cpu_sampling_error = str(exc)
            return
        self.cpu_sample_hz = hz

    def _load_host_domains(self, host: BpfObject) -> None:
        """Attach the host tracepoints; load and attach the optional domains and the late-load watch."""
        o = self.opts
        # The fork hook always runs: descendants of targets must become targets.
        for prog, tp in HOST_PROGRAMS.items():
            if o.host or prog == "gs_process_fork":
                host.attach_auto(prog)
                self.host_links.append(tp)
        wanted = {"io": o.host and o.io, "net": o.host and o.tcp, "mem": o.host and o.memory}
        for name, progs in HOST_DOMAINS.items():
            if not wanted[name]:
                continue
            obj = BpfObject(object_path(f"{name}.bpf.o"))
            self._domains[name] = obj
            configure_domain(obj, host)
            obj.load()
            for prog, tp in progs.items():
                obj.attach_auto(prog)
                self.host_links.append(tp)
        if o.late_loads:
            try:
                self._load_late_loads(host)
            except BpfLoadError as exc:
                # An older kernel (no vm_unmapped_area BTF tracepoint, no
                # bpf_task_pt_regs): the once-a-second rescan of target
                # processes' maps still finds late libraries, after their first calls.
                self.late_loads_error = str(exc)
                if self._loads is not None:
                    self._loads.close()
                    self._loads = None

    def _load_late_loads(self, host: BpfObject) -> None:
        loads = BpfObject(object_path("loads.bpf.o"))
        self._loads = loads
        configure_late_loads(loads, host, self.opts, hold_max_ns=int(HOLD_MAX_S * 1e9))
        loads.load()
        for prog in LOAD_PROGRAMS:
            loads.attach_auto(prog)
        self.load_ring = VarReader(loads.map_fd("load_events"), LOAD_RING_BYTES)

    # -- targets -------------------------------------------------------------

    def add_target(self, pid: int) -> None:
        if not os.path.exists(f"/proc/{pid}"):
            raise ProcessNotFoundError(f"no process with pid {pid}")
        self._host.lib.map_update(self._host.map_fd("targets"), struct.pack("<I", pid), b"\x01")

    # -- uprobes -------------------------------------------------------------

    def attach_library(self, lib: CudaLibrary) -> AttachedLibrary | None:
        """Attach entry (and return) probes to every probed API in one library."""
        with self._attach_lock:
            att = self._attach_library(lib)
        if att is not None:
            try:
                self.mark_library(kernel_file_key(os.stat(lib.path)), LibState.PROBED)
            except OSError:
                pass
        return att

    def _attach_library(self, lib: CudaLibrary) -> AttachedLibrary | None:
        if lib.inode in self.attached or self._cuda is None:
            return None
        plan = probe_plan(lib.path)
        if not plan:
            return None
        att = AttachedLibrary(lib)
        stepped = stepped_offsets(lib.path, [off for off, _, _ in plan])
        sampled = self.samples
        always: list[tuple[int, int]] = []
        for off, op, _ in plan:
            cookie = int(op) | (COOKIE_STEPPED if off in stepped else 0)
            if sampled and int(op) in SAMPLED_PROBE_OPS:
                att.sampled_offsets.append(off)
                att.sampled_cookies.append(cookie | COOKIE_SAMPLED)
            else:
                always.append((off, cookie))
        if always:
            att.links.extend(
                self._attach_probes(lib.path, [o for o, _ in always], [c for _, c in always], returns_first=False)
            )
        if att.sampled_offsets and self.sampled_attached:
            att.sampled_links = self._attach_probes(lib.path, att.sampled_offsets, att.sampled_cookies)
        att.ops.update(op for _, op, _ in plan)
        self.attached[lib.inode] = att
        return att

    def _attach_probes(
        self, path: str, offsets: list[int], cookies: list[int], *, returns_first: bool = True
    ) -> list[Link]:
        """Entry (and return) probes on these offsets (see ``attach_uprobes``)."""
        assert self._cuda is not None
        return attach_uprobes(
            self._cuda,
            path,
            offsets,
            cookies,
            multi=self.multi,
            entry_only=self.opts.entry_only,
            returns_first=returns_first,
        )

    # -- sampled ops (the overhead budget) --------------------------------------

    def set_sampled_probes(self, attached: bool) -> None:
        """Attach or detach the sampled ops' probes in every library (gpuscope.agent.sampling's windows).

        Detaching removes the entry probes before the return probes, so calls in flight still return seen;
        each step waits for one round of RCU grace periods (tens of ms) on this thread, not in the workload.
        """
        with self._attach_lock:
            if attached == self.sampled_attached or self._cuda is None:
                return
            self.sampled_attached = attached
            if attached:
                for att in self.attached.values():
                    if att.sampled_offsets:
                        att.sampled_links = self._attach_probes(
                            att.library.path, att.sampled_offsets, att.sampled_cookies
                        )
                return
            cuda = self._cuda
            links = [lk for att in self.attached.values() for lk in att.sampled_links]
            for att in self.attached.values():
                att.sampled_links = []
            entries = [(cuda, lk) for lk in links if not lk.description.startswith("gs_cuda_return")]
            returns = [(cuda, lk) for lk in links if lk.description.startswith("gs_cuda_return")]
            destroy_together(entries)
            destroy_together(returns)
            gone = {id(lk) for lk in links}
            cuda.links[:] = [lk for lk in cuda.links if id(lk) not in gone]

    def set_sample_gate(self, open_: bool) -> None:
        """Open or close the window in which the sampled ops' probes emit records (the ``sample_gate`` map)."""
        if self._cuda is not None:
            self._cuda.lib.map_update(
                self._cuda.map_fd("sample_gate"), struct.pack("<I", 0), struct.pack("<I", 1 if open_ else 0)
            )

    def attach_calibration(self, path: str, offsets: list[int], *, retprobe: bool) -> list[Link]:
        """Probes on the calibration library for this process alone: a record's work per hit, discarded."""
        with self._attach_lock:
            if self._cuda is None:
                return []
            return attach_calibration_uprobes(self._cuda, path, offsets, multi=self.multi, retprobe=retprobe)

    def detach_calibration(self, links: list[Link]) -> None:
        with self._attach_lock:
            if self._cuda is None:
                return
            cuda = self._cuda
            destroy_together([(cuda, lk) for lk in links])
            gone = {id(lk) for lk in links}
            cuda.links[:] = [lk for lk in cuda.links if id(lk) not in gone]

    # -- libraries mapped after start -----------------------------------------

    def mark_library(self, key: tuple[int, int], state: LibState) -> None:
        """Tell the kernel a library file is dealt with: its next mappings are not reported."""
        if self._loads is not None:
            self._loads.lib.map_update(self._loads.map_fd("lib_state"), struct.pack("<QQ", *key), bytes([state]))

    def read_loads(self) -> np.ndarray:
        """Late library loads the kernel reported since the last read (LOAD_EVENT_DTYPE)."""
        if self.load_ring is None:
            return np.zeros(0, dtype=LOAD_EVENT_DTYPE)
        recs = self.load_ring.read()
        return np.frombuffer(b"".join(recs), dtype=LOAD_EVENT_DTYPE) if recs else np.zeros(0, LOAD_EVENT_DTYPE)

    @property
    def load_fd(self) -> int | None:
        """A descriptor that polls readable when a late load is reported."""
        return self._loads.map_fd("load_events") if self._loads is not None else None

    def release(self, pid: int) -> bool:
        """Let a held process run again; False when this agent may not signal it (no CAP_KILL for another
        user's process): the kernel's bounded hold then lets it go by itself."""
        resumed = True
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        except PermissionError:
            resumed = False
        if self._loads is not None:
            self._loads.lib.map_delete(self._loads.map_fd("holds"), struct.pack("<I", pid))
        return resumed

    def held_pids(self) -> list[int]:
        """Processes the kernel holds now."""
        if self._loads is None:
            return []
        return [struct.unpack("<I", k)[0] for k in self._loads.lib.map_keys(self._loads.map_fd("holds"), 4)]

    # -- reading -------------------------------------------------------------

    def read(self, max_records: int = 1 << 18) -> np.ndarray:
        assert self.ring is not None
        return self.ring.read(max_records)

    @property
    def backlog(self) -> bool:
        """Whether the last ``read`` left records in the ring (it returned its limit, and more were there)."""
        return self.ring is not None and self.ring.backlog

    def read_aux(self) -> list[AuxRecord]:
        return self.aux.read() if self.aux is not None else []

    def read_stacks(self) -> list[bytes]:
        """Raw stack records (gpuscope.stacks.records decodes them)."""
        # Bounded per poll: stacks are decoded in Python, and a long decode
        # would starve the main ring. Records the stack ring cannot hold are
        # counted (drop_stack); events themselves are never delayed for stacks.
        return self.stack_ring.read(max_records=2048) if self.stack_ring is not None else []

    def drain_page_allocs(self) -> dict[int, tuple[int, int]]:
        """Page allocations since the last drain: {pid: (allocations, bytes)}, exact.

        pid 0 collects every process that is not a target.
        """
        mem = self._domains.get("mem")
        if mem is None:
            return {}
        self._page_gen += 1
        return drain_page_counters(mem, self._page_gen)

    def counters(self) -> dict[str, int]:
        """Kernel-side counters: submitted records and drops by source (after close(), the last ones read).

        Safe from any thread: close() waits for a read in progress.
        """
        with self._counters_lock:
            if self._host_closed:
                return dict(self._last_counters)
            vals = read_percpu_u64(self._host.lib, self._host.map_fd("stats"), STAT_SLOTS)
            out = {s.name.lower(): vals[int(s)] for s in Stat}
            out["dropped"] = sum(vals[int(s)] for s in DROP_STATS)
            self._last_counters = out
            return dict(out)

    def targets_alive(self) -> bool:
        """Whether a process that can make traced calls may still run: always, unless only targets are traced."""
        if not self.opts.filter_targets:
            return True
        keys = self._host.lib.map_keys(self._host.map_fd("targets"), 4)
        return any(_exists(struct.unpack("<I", key)[0]) for key in keys)

    def detach(self) -> None:
        """Remove every probe; the ring keeps what was already submitted."""
        if self._loads is not None:
            # No new holds from here on; let go of any still in place.
            self._loads.detach_all()
            for pid in self.held_pids():
                self.release(pid)
        objs = [*self._domains.values(), *([self._cuda] if self._cuda is not None else []), self._host]
        links = [(obj, link) for obj in objs for link in reversed(obj.links)]
        if self.targets_alive():
            # Return probes go before entry probes, so that no call can enter
            # unseen and return seen; within each step the links go together.
            returns = [(o, lk) for o, lk in links if lk.description.startswith("gs_cuda_return")]
            destroy_together(returns)
            destroy_together([(o, lk) for o, lk in links if not lk.description.startswith("gs_cuda_return")])
        else:
            # Every traced process has exited (a command that ended): no call can cross the detach, and one
            # round of RCU grace periods instead of two takes ~70 ms off the end of every `trace -- CMD`.
            destroy_together(links)
        for obj in objs:
            obj.links.clear()
        self.attached.clear()

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.aux is not None:
            self.aux.close()
            self.aux = None
        if self.stack_ring is not None:
            self.stack_ring.close()
            self.stack_ring = None
        if self.load_ring is not None:
            self.load_ring.close()
            self.load_ring = None
        if self._loads is not None:
            for pid in self.held_pids():
                self.release(pid)
            self._loads.close()
            self._loads = None
        for obj in self._domains.values():
            obj.close()
        self._domains.clear()
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None
        with self._counters_lock:
            self._host_closed = True
            self._host.close()
        self.attached.clear()


def _exists(pid: int) -> bool:
    """Whether a process (or a zombie) with this pid exists, whoever owns it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's (EPERM)
    return True
