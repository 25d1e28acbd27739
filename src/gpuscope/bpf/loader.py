"""Typed facade over libbpf objects: open, configure, load, attach, close."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from gpuscope.bpf.libbpf import BPF_TRACE_UPROBE_MULTI, Libbpf, close_fd, libbpf
from gpuscope.errors import BpfLoadError, BpfObjectMissingError, PermissionDeniedError
from gpuscope.platform.elf import ElfFile


def object_path(name: str) -> Path:
    """Locate a compiled BPF object shipped in the package (``gpuscope/_bpf``).

    ``GPUSCOPE_BPF_DIR`` overrides the location (used by development builds).
    """
    override = os.environ.get("GPUSCOPE_BPF_DIR")
    if override:
        path = Path(override) / name
    else:
        path = Path(str(resources.files("gpuscope") / "_bpf" / name))
    if not path.is_file():
        raise BpfObjectMissingError(f"BPF object {name} not found at {path}")
    return path


def _raise_load_error(what: str, err: int) -> None:
    if err in (errno.EPERM, errno.EACCES):
        raise PermissionDeniedError(f"{what}: {os.strerror(err)} (BPF needs root or CAP_BPF+CAP_PERFMON)")
    raise BpfLoadError(f"{what}: {os.strerror(err)} (errno {err})")


@dataclass
class Link:
    """An attached program: a libbpf link pointer or a raw link fd."""

    description: str
    ptr: int = 0
    fd: int = -1
    probes: int = 1

    def destroy(self, lib: Libbpf) -> None:
        if self.ptr:
            lib.bpf_link__destroy(self.ptr)
            self.ptr = 0
        if self.fd >= 0:
            close_fd(self.fd)
            self.fd = -1


@dataclass
class BpfObject:
    """One compiled ``*.bpf.o`` file, opened and (after :meth:`load`) loaded."""

    path: Path
    lib: Libbpf = field(default_factory=libbpf)
    ptr: int = 0
    links: list[Link] = field(default_factory=list)
    _rodata: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ptr = self.lib.bpf_object__open_file(os.fsencode(str(self.path)), None)
        if not ptr:
            _raise_load_error(f"open {self.path.name}", self.lib.ptr_error(ptr))
        self.ptr = ptr
        with ElfFile(str(self.path)) as elf:
            for sym in elf.symbols(dynamic=False):
                if 0 < sym.section < len(elf.sections) and elf.sections[sym.section].name == ".rodata":
                    self._rodata[sym.name] = (sym.value, sym.size)

    # -- before load ---------------------------------------------------------

    def set_const(self, name: str, value: int) -> None:
        """Set a ``const volatile`` global (a load-time tunable)."""
        off, size = self._rodata[name]
        fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[size]
        self.lib.write_initial_value(self._map_ptr(".rodata"), off, struct.pack(fmt, value))

    def set_max_entries(self, map_name: str, n: int) -> None:
        self.lib.bpf_map__set_max_entries(self._map_ptr(map_name), n)

    def reuse_map(self, map_name: str, fd: int) -> None:
        """Share a map with an already loaded object (one ring, one target set)."""
        if self.lib.bpf_map__reuse_fd(self._map_ptr(map_name), fd) != 0:
            _raise_load_error(f"reuse map {map_name}", ctypes.get_errno())

    def set_uprobe_multi(self, prog_name: str) -> None:
        """Mark a program for uprobe_multi links; must precede load()."""
        self.lib.bpf_program__set_expected_attach_type(self._prog_ptr(prog_name), BPF_TRACE_UPROBE_MULTI)

    def disable(self, prog_name: str) -> None:
        self.lib.bpf_program__set_autoload(self._prog_ptr(prog_name), False)

    def load(self) -> None:
        if self.lib.bpf_object__load(self.ptr) != 0:
            _raise_load_error(f"load {self.path.name}", ctypes.get_errno())

    # -- after load ----------------------------------------------------------

    def map_fd(self, name: str) -> int:
        return int(self.lib.bpf_map__fd(self._map_ptr(name)))

    def prog_fd(self, name: str) -> int:
        return int(self.lib.bpf_program__fd(self._prog_ptr(name)))

    def attach_auto(self, prog_name: str) -> Link:
        """Attach a tracepoint-style program by its section name."""
        ptr = self.lib.bpf_program__attach(self._prog_ptr(prog_name))
        if not ptr:
            _raise_load_error(f"attach {prog_name}", self.lib.ptr_error(ptr))
        link = Link(prog_name, ptr=ptr)
        self.links.append(link)
        return link

    def attach_perf_event(self, prog_name: str, perf_fd: int) -> Link:
        """Attach a perf_event program to an open perf event; the link owns the event's fd from here."""
        ptr = self.lib.bpf_program__attach_perf_event(self._prog_ptr(prog_name), perf_fd)
        if not ptr:
            err = self.lib.ptr_error(ptr)
            close_fd(perf_fd)
            _raise_load_error(f"attach {prog_name}", err)
        link = Link(f"{prog_name}@perf{perf_fd}", ptr=ptr)
        self.links.append(link)
        return link

    def attach_uprobe_multi(
        self, prog_name: str, path: str, offsets: list[int], cookies: list[int], *, retprobe: bool, pid: int = 0
    ) -> Link:
        try:
            fd = self.lib.link_create_uprobe_multi(
                self.prog_fd(prog_name), path, offsets, cookies, retprobe=retprobe, pid=pid
            )
        except OSError as exc:
            _raise_load_error(f"attach {len(offsets)} uprobes to {path}", exc.errno or errno.EINVAL)
        link = Link(f"{prog_name}@{path}", fd=fd, probes=len(offsets))
        self.links.append(link)
        return link

    def attach_uprobe(self, prog_name: str, path: str, offset: int, cookie: int, *, retprobe: bool) -> Link:
        """Classic perf-event uprobe: one link per symbol (slow to detach)."""

        class UprobeOpts(ctypes.Structure):
            _fields_ = [
                ("sz", ctypes.c_size_t),
                ("ref_ctr_offset", ctypes.c_size_t),
                ("bpf_cookie", ctypes.c_uint64),
                ("retprobe", ctypes.c_bool),
                ("func_name", ctypes.c_char_p),
            ]

        opts = UprobeOpts(ctypes.sizeof(UprobeOpts), 0, cookie, retprobe, None)
        ptr = self.lib.bpf_program__attach_uprobe_opts(
            self._prog_ptr(prog_name), -1, os.fsencode(path), offset, ctypes.byref(opts)
        )
        if not ptr:
            _raise_load_error(f"attach uprobe {path}+{offset:#x}", self.lib.ptr_error(ptr))
        link = Link(f"{prog_name}@{path}+{offset:#x}", ptr=ptr)
        self.links.append(link)
        return link

    def detach_all(self) -> None:
        # Newest first: return probes (attached after entry probes) go before
        # the entry probes, so no call can enter unseen and return seen.
        for link in reversed(self.links):
            link.destroy(self.lib)
        self.links.clear()

    def close(self) -> None:
        self.detach_all()
        if self.ptr:
            self.lib.bpf_object__close(self.ptr)
            self.ptr = 0

    # -- internals -----------------------------------------------------------

    def _map_ptr(self, name: str) -> int:
        p = self.lib.bpf_object__find_map_by_name(self.ptr, name.encode())
        if not p:
            raise BpfLoadError(f"{self.path.name}: no map named {name}")
        return int(p)

    def _prog_ptr(self, name: str) -> int:
        p = self.lib.bpf_object__find_program_by_name(self.ptr, name.encode())
        if not p:
            raise BpfLoadError(f"{self.path.name}: no program named {name}")
        return int(p)


def read_percpu_u64(lib: Libbpf, fd: int, slots: int) -> list[int]:
    """Sum each slot of a per-CPU array of u64 over all possible CPUs."""
    ncpu = int(lib.libbpf_num_possible_cpus())
    out = []
    for i in range(slots):
        raw = lib.map_lookup(fd, struct.pack("<I", i), 8 * ncpu)
        out.append(sum(struct.unpack(f"<{ncpu}Q", raw)) if raw else 0)
    return out
