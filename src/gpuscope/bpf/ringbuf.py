"""A raw mmap reader for a BPF ring buffer of fixed-size records.

libbpf 1.1's ``ring_buffer__poll`` never returns while data keeps arriving,
and a ctypes callback per record caps out near 700k events/s. This reader maps
the ring itself and hands out numpy arrays of whole spans of records.

Layout (kernel ABI): page 0 of the map fd is the consumer page (RW,
``consumer_pos`` at offset 0); from page 1 the producer page (RO,
``producer_pos`` at 0) and then the data area mapped twice, so a record never
wraps.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from gpuscope.bpf.libbpf import u64_at
from gpuscope.bpf.wire import AUX_HEADER_DTYPE, RECORD_DTYPE, RECORD_SIZE

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30


class _MappedRing:
    """The two mappings of a ring buffer map: consumer page, producer page + data twice."""

    def __init__(self, map_fd: int, size: int) -> None:
        page = mmap.PAGESIZE
        self.size = size
        self._mask = size - 1
        self._page = page
        self._cons_map = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._prod_map = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._cons = u64_at(self._cons_map, 0)
        # The producer page is read-only: read producer_pos through numpy as a
        # single aligned 8-byte load.
        self._prod_view = np.frombuffer(self._prod_map, dtype="<u8", count=1, offset=0)

    def close(self) -> None:
        self._release_views()
        del self._cons, self._prod_view
        self._cons_map.close()
        self._prod_map.close()

    def _release_views(self) -> None:
        """Drop subclass views of the mappings (an mmap with live exports cannot close)."""


class RingReader(_MappedRing):
    """Consume records from a ring buffer map of ``size`` bytes."""

    def __init__(self, map_fd: int, size: int) -> None:
        super().__init__(map_fd, size)
        self.backlog = False
        self._data = np.frombuffer(self._prod_map, dtype=np.uint8, offset=self._page)
        self._hdr_u32 = np.frombuffer(self._prod_map, dtype="<u4", offset=self._page)

    def _release_views(self) -> None:
        del self._data, self._hdr_u32

    def read(self, max_records: int = 1 << 18) -> np.ndarray:
        """Return the committed records after the consumer position, and consume them.

        Stops at the first record still being written (BUSY). Discarded records
        are dropped. Returns an array of ``RECORD_DTYPE['event']``.
        """
        cons = int(self._cons.value)
        prod = int(self._prod_view[0])
        # Whether records stay behind this read's limit: what it returns is then not all the kernel holds.
        self.backlog = (prod - cons) // RECORD_SIZE > max_records
        avail = min((prod - cons) // RECORD_SIZE, max_records)
        if avail <= 0:
            return np.empty(0, dtype=RECORD_DTYPE["event"])
        start = cons & self._mask
        # Check the headers on the live mapping first, then copy: a memcpy does
        # not read in ascending order and could see a header as committed
        # before its payload.
        # A strided view of the headers (the data pages are mapped twice, so it may run past the end).
        step = RECORD_SIZE // 4
        lens = self._hdr_u32[start // 4 : start // 4 + avail * step : step]
        busy = np.flatnonzero(lens & BUSY_BIT)
        n = int(busy[0]) if busy.size else avail
        if n == 0:
            return np.empty(0, dtype=RECORD_DTYPE["event"])
        span = self._data[start : start + n * RECORD_SIZE].copy()
        recs = span.view(RECORD_DTYPE)
        keep = (recs["len"] & DISCARD_BIT) == 0
        events = recs["event"][keep] if not keep.all() else recs["event"]
        # One 8-byte store: the kernel reads consumer_pos concurrently.
        self._cons.value = cons + n * RECORD_SIZE
        return np.ascontiguousarray(events)


@dataclass(frozen=True, slots=True)
class AuxRecord:
    ts_ns: int
    pid: int
    tid: int
    kind: int
    payload: bytes


class AuxReader:
    """Decode ``struct gs_aux_header`` + payload records (rare: one per exec)."""

    def __init__(self, map_fd: int, size: int) -> None:
        self._ring = VarReader(map_fd, size)

    def close(self) -> None:
        self._ring.close()

    def read(self) -> list[AuxRecord]:
        out: list[AuxRecord] = []
        hsize = AUX_HEADER_DTYPE.itemsize
        for body in self._ring.read():
            if len(body) < hsize:
                continue
            hdr = np.frombuffer(body, dtype=AUX_HEADER_DTYPE, count=1)[0]
            n = min(int(hdr["len"]), len(body) - hsize)
            out.append(
                AuxRecord(
                    int(hdr["ts_ns"]), int(hdr["pid"]), int(hdr["tid"]), int(hdr["kind"]), body[hsize : hsize + n]
                )
            )
        return out


class VarReader(_MappedRing):
    """Consume variable-length records as raw bytes (stack and exec records).

    Records are walked one at a time: they are rarer than events (the stack
    policy samples launches) and each needs its own decoding anyway.
    """

    def read(self, max_records: int = 1 << 16) -> list[bytes]:
        out: list[bytes] = []
        cons = int(self._cons.value)
        prod = int(self._prod_view[0])
        while cons < prod and len(out) < max_records:
            off = self._page + (cons & self._mask)
            length = int(np.frombuffer(self._prod_map, dtype="<u4", count=1, offset=off)[0])
            if length & BUSY_BIT:
                break
            size = length & ~(BUSY_BIT | DISCARD_BIT)
            if not length & DISCARD_BIT:
                out.append(bytes(self._prod_map[off + 8 : off + 8 + size]))
            cons += (8 + size + 7) & ~7
        self._cons.value = cons
        return out
