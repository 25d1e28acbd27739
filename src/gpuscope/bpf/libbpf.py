"""The one ctypes boundary: libbpf.so.1, the raw bpf() syscall, and glibc's mallopt.

Every foreign function the project calls is declared in ``_SIGNATURES``, with
``use_errno=True`` so failures carry errno. Nothing outside ``gpuscope.bpf``
imports ctypes (enforced by ruff TID251).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from typing import Any

from gpuscope.errors import LibbpfMissingError

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_size_t = ctypes.c_size_t
c_long = ctypes.c_long

# name: (restype, argtypes)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "libbpf_major_version": (ctypes.c_uint32, []),
    "libbpf_minor_version": (ctypes.c_uint32, []),
    "libbpf_set_print": (c_void_p, [c_void_p]),
    "libbpf_num_possible_cpus": (c_int, []),
    "libbpf_probe_bpf_prog_type": (c_int, [c_int, c_void_p]),
    "bpf_object__open_file": (c_void_p, [c_char_p, c_void_p]),
    "bpf_object__load": (c_int, [c_void_p]),
    "bpf_object__close": (None, [c_void_p]),
    "bpf_object__find_program_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__find_map_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_program__set_expected_attach_type": (c_int, [c_void_p, c_int]),
    "bpf_program__set_autoload": (c_int, [c_void_p, ctypes.c_bool]),
    "bpf_program__fd": (c_int, [c_void_p]),
    "bpf_program__attach": (c_void_p, [c_void_p]),
    "bpf_program__attach_uprobe_opts": (c_void_p, [c_void_p, c_int, c_char_p, c_size_t, c_void_p]),
    "bpf_program__attach_perf_event": (c_void_p, [c_void_p, c_int]),
    "bpf_link__destroy": (c_int, [c_void_p]),
    "bpf_map__fd": (c_int, [c_void_p]),
    "bpf_map__reuse_fd": (c_int, [c_void_p, c_int]),
    "bpf_map__set_max_entries": (c_int, [c_void_p, ctypes.c_uint32]),
    "bpf_map__initial_value": (c_void_p, [c_void_p, ctypes.POINTER(c_size_t)]),
    "bpf_map_update_elem": (c_int, [c_int, c_void_p, c_void_p, ctypes.c_uint64]),
    "bpf_map_lookup_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_delete_elem": (c_int, [c_int, c_void_p]),
    "bpf_map_get_next_key": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_enable_stats": (c_int, [c_int]),
}

BPF_PROG_TYPE_KPROBE = 2
BPF_TRACE_UPROBE_MULTI = 48
BPF_LINK_CREATE = 28
BPF_PROG_LOAD = 5
BPF_F_UPROBE_MULTI_RETURN = 1
_SYS_BPF = 321  # x86_64
# perf_event_open(2) by architecture; a software cpu-clock event counts ns of CPU time.
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_FLAG_FD_CLOEXEC = 8
_PERF_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7: the kernel accepts any known size


class Libbpf:
    """Typed access to the system libbpf. Construct once via :func:`libbpf`."""

    def __init__(self, path: str | None = None) -> None:
        name = path or "libbpf.so.1"
        try:
            self._lib = ctypes.CDLL(name, use_errno=True)
        except OSError as exc:
            raise LibbpfMissingError(f"cannot load {name}: {exc}") from None
        for fn, (restype, argtypes) in _SIGNATURES.items():
            f = getattr(self._lib, fn, None)
            if f is None:
                continue  # absent from old releases: calling it raises AttributeError
            f.restype = restype
            f.argtypes = argtypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = c_long
        self._quiet_cb: Any = None

    def __getattr__(self, fn: str) -> Any:
        if fn not in _SIGNATURES:
            raise AttributeError(fn)
        return getattr(self._lib, fn)

    def version(self) -> tuple[int, int]:
        return (int(self._lib.libbpf_major_version()), int(self._lib.libbpf_minor_version()))

    def silence(self) -> None:
        """Route libbpf's own log lines nowhere: failures are reported by us, once."""
        proto = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
        self._quiet_cb = proto(lambda level, fmt, args: 0)
        self._lib.libbpf_set_print(ctypes.cast(self._quiet_cb, c_void_p))

    # -- raw syscalls libbpf 1.1 has no API for -----------------------------

    def load_uprobe_multi_stub(self) -> int:
        """Load a two-instruction uprobe_multi program (``return 0``) and return its fd: for feature probes.

        Raises OSError with the kernel's errno when the kernel refuses it.
        """
        insns = (ctypes.c_uint8 * 16)(0xB7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0)  # r0 = 0; exit
        license_ = ctypes.create_string_buffer(b"GPL")
        attr = (ctypes.c_uint8 * 128)()
        base = ctypes.addressof(attr)
        ctypes.c_uint32.from_address(base + 0).value = BPF_PROG_TYPE_KPROBE
        ctypes.c_uint32.from_address(base + 4).value = 2
        ctypes.c_uint64.from_address(base + 8).value = ctypes.addressof(insns)
        ctypes.c_uint64.from_address(base + 16).value = ctypes.addressof(license_)
        ctypes.c_uint32.from_address(base + 68).value = BPF_TRACE_UPROBE_MULTI  # expected_attach_type
        fd = int(self._libc.syscall(_SYS_BPF, BPF_PROG_LOAD, attr, 128))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def link_create_uprobe_multi(
        self,
        prog_fd: int,
        path: str,
        offsets: list[int],
        cookies: list[int],
        *,
        retprobe: bool,
        pid: int = 0,
    ) -> int:
        """Create one uprobe_multi link (kernel >= 6.6) and return its fd.

        Raises OSError with the kernel's errno on failure.
        """
        n = len(offsets)
        path_b = ctypes.create_string_buffer(os.fsencode(path))
        offs = (ctypes.c_uint64 * n)(*offsets)
        cks = (ctypes.c_uint64 * n)(*cookies)
        attr = (ctypes.c_uint8 * 128)()
        base = ctypes.addressof(attr)

        def put32(off: int, v: int) -> None:
            ctypes.c_uint32.from_address(base + off).value = v

        def put64(off: int, v: int) -> None:
            ctypes.c_uint64.from_address(base + off).value = v

        put32(0, prog_fd)
        put32(8, BPF_TRACE_UPROBE_MULTI)
        put64(16, ctypes.addressof(path_b))
        put64(24, ctypes.addressof(offs))
        put64(40, ctypes.addressof(cks))
        put32(48, n)
        put32(52, BPF_F_UPROBE_MULTI_RETURN if retprobe else 0)
        put32(56, pid)
        fd = int(self._libc.syscall(_SYS_BPF, BPF_LINK_CREATE, attr, 128))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    def open_cpu_clock(self, cpu: int, period_ns: int) -> int:
        """Open a software cpu-clock perf event on one CPU, all tasks, one sample per ``period_ns`` of CPU time.

        Returns its fd (close-on-exec); raises OSError with the kernel's errno.
        """
        nr = _SYS_PERF_EVENT_OPEN.get(os.uname().machine)
        if nr is None:
            raise OSError(errno.ENOSYS, f"perf_event_open: unknown system call number on {os.uname().machine}")
        attr = (ctypes.c_uint8 * _PERF_ATTR_SIZE)()
        base = ctypes.addressof(attr)
        ctypes.c_uint32.from_address(base + 0).value = PERF_TYPE_SOFTWARE
        ctypes.c_uint32.from_address(base + 4).value = _PERF_ATTR_SIZE
        ctypes.c_uint64.from_address(base + 8).value = PERF_COUNT_SW_CPU_CLOCK
        ctypes.c_uint64.from_address(base + 16).value = period_ns  # sample_period (freq bit clear)
        fd = int(self._libc.syscall(nr, attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return fd

    # -- helpers -------------------------------------------------------------

    @staticmethod
    def ptr_error(ptr: int | None) -> int:
        """libbpf >= 1.0 returns NULL and sets errno on failure."""
        if ptr:
            return 0
        return ctypes.get_errno() or errno.EINVAL

    def map_update(self, fd: int, key: bytes, value: bytes, flags: int = 0) -> None:
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(value, len(value))
        if self._lib.bpf_map_update_elem(fd, k, v, flags) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def map_lookup(self, fd: int, key: bytes, value_size: int) -> bytes | None:
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(value_size)
        if self._lib.bpf_map_lookup_elem(fd, k, v) != 0:
            return None
        return v.raw

    def map_keys(self, fd: int, key_size: int) -> list[bytes]:
        """Every key of a hash map (a snapshot: concurrent updates may be missed)."""
        keys: list[bytes] = []
        cur = None
        nxt = ctypes.create_string_buffer(key_size)
        while True:
            rc = self._lib.bpf_map_get_next_key(fd, cur, nxt)
            if rc != 0:
                return keys
            keys.append(nxt.raw)
            cur = ctypes.create_string_buffer(nxt.raw, key_size)

    def map_delete(self, fd: int, key: bytes) -> bool:
        k = ctypes.create_string_buffer(key, len(key))
        return int(self._lib.bpf_map_delete_elem(fd, k)) == 0

    def write_initial_value(self, map_ptr: int, offset: int, data: bytes) -> None:
        """Write into a global-data map (.rodata/.data) before load."""
        size = c_size_t(0)
        p = self._lib.bpf_map__initial_value(map_ptr, ctypes.byref(size))
        if not p or offset + len(data) > size.value:
            raise OSError(errno.EINVAL, "global variable out of range")
        ctypes.memmove(p + offset, data, len(data))


_LIB: Libbpf | None = None


def libbpf() -> Libbpf:
    """Return the process-wide libbpf binding, loading it on first use."""
    global _LIB
    if _LIB is None:
        _LIB = Libbpf()
        _LIB.silence()
    return _LIB


def close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def u64_at(buf: Any, offset: int) -> Any:
    """A single 8-byte view into a writable buffer.

    Ring-buffer positions must be read and written with one 8-byte access: a
    byte-wise store (struct.pack_into) is torn and the kernel sees a bogus
    position.
    """
    return ctypes.c_uint64.from_buffer(buf, offset)


# glibc's mallopt parameters (malloc.h), and how much freed memory a batch command keeps for reuse.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_KEEP_FREED_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory in the process for reuse, for a short command that allocates in bulk.

    By default glibc gives every block of 32 MB or more back to the kernel when
    it is freed, and the next one costs a page fault per page touched. An
    ``explain`` of millions of calls allocates and frees such temporaries by
    the gigabyte: with the memory kept, a 10M-event file spent about 0.6 s in
    the kernel instead of 1.0-4.5 s, and its peak RSS did not change (measured
    on a 2-CPU VM, bench/explain_bench.py). Not for servers: what they free is
    kept until they exit.

    Threads started afterwards allocate from the same (main) arena, so memory
    one frees serves the other: each thread would otherwise get an arena of
    its own, keep its freed memory apart, and give a heap back to the kernel
    once it is empty. explain's rules run on two threads; with one arena the
    10M bench file's run faulted 30-34k pages instead of 39-52k, and its peak
    RSS was 730-760 MiB instead of 745-795 (4 runs each, alternated).
    Call it before any thread allocates. Returns False where the C library
    has no mallopt (musl: nothing changes) or refuses a setting (the others
    still apply).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.restype = c_int
    mallopt.argtypes = [c_int, c_int]
    settings = ((_M_MMAP_THRESHOLD, _KEEP_FREED_BYTES), (_M_TRIM_THRESHOLD, _KEEP_FREED_BYTES), (_M_ARENA_MAX, 1))
    return all([bool(mallopt(param, value)) for param, value in settings])
