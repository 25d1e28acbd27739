"""drain: how fast records leave the kernel, to Python and on to SQLite.

A benchmark-only BPF producer (producer.bpf.c, a tracepoint on
sys_enter, filtered to getppid) emits bursts of `struct gs_event` records into a 32 MiB
ring; bench/gen.c triggers it at a paced rate on one CPU. This process drains
the ring on the other CPU the way the agent does (RingReader.read, 10 ms
sleep when empty; records are submitted with BPF_RB_NO_WAKEUP):

  kernel -> agent    decode only, every record's sequence number checked
  kernel -> SQLite   RingReader -> EventWriter (WAL, synchronous=NORMAL)

A point passes when the producer counted no failed reserve, every sequence
number arrived exactly once, and (to SQLite) every record was stored with the
writer finishing within max(0.5 s, 10 % of the run) after the producer
stopped, so a backlog parked in the writer queue does not count as sustained.
"""

from __future__ import annotations

import os
import platform
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from benchlib import (
    CONSUMER_CPU,
    PRODUCER_CPU,
    Result,
    build_bench_bpf,
    build_c,
    events_include_for_wire,
    fmt_rate,
    pin_to,
    unpin,
)

from gpuscope.bpf.loader import BpfObject
from gpuscope.bpf.ringbuf import RingReader
from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import EventWriter

RING_BYTES = 32 << 20
PER_CALL = 64  # records per getppid(): bursts keep the trigger cost negligible
POLL_INTERVAL_S = 0.01
TARGET_AGENT = 2_000_000
TARGET_STORE = 400_000


@dataclass(frozen=True, slots=True)
class Point:
    offered: float  # events/s asked of the generator
    produced: float  # events/s the generator achieved
    attempted: int
    received: int
    dropped: int
    seq_ok: bool
    cpu_pct: float  # this process (reader + writer thread), of one CPU
    max_gap_ms: float  # longest time between two reads of the ring
    stored: int = -1
    tail_s: float = 0.0  # writer still busy after the producer stopped
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        ok = self.dropped == 0 and self.seq_ok and self.received == self.attempted
        if self.stored >= 0:
            ok = ok and self.stored == self.attempted and self.tail_s <= max(0.5, 0.1 * self.duration_s)
        return ok


class Producer:
    """The loaded producer object, its ring and its counters."""

    def __init__(self, include: Path) -> None:
        self.obj = BpfObject(build_bench_bpf("producer", include))
        self.obj.set_max_entries("events", RING_BYTES)
        self.obj.set_const("per_call", PER_CALL)
        self.obj.load()
        self.obj.attach_auto("bench_produce")
        self.ring = RingReader(self.obj.map_fd("events"), RING_BYTES)
        self.gen = build_c("gen")

    def _set(self, map_name: str, key: int, value: bytes) -> None:
        self.obj.lib.map_update(self.obj.map_fd(map_name), struct.pack("<I", key), value)

    def counts(self) -> tuple[int, int]:
        fd = self.obj.map_fd("bench_counts")
        vals = [self.obj.lib.map_lookup(fd, struct.pack("<I", i), 8) for i in (0, 1)]
        seq, drops = (struct.unpack("<Q", v)[0] if v else 0 for v in vals)
        return seq, drops

    def start(self, rate: float, duration_s: float) -> subprocess.Popen[bytes]:
        """Reset the counters and start the paced generator."""
        self._set("bench_counts", 0, struct.pack("<Q", 0))
        self._set("bench_counts", 1, struct.pack("<Q", 0))
        calls_per_s = rate / PER_CALL
        proc = subprocess.Popen(
            [str(self.gen), f"{calls_per_s:.3f}", f"{duration_s}", str(PRODUCER_CPU)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._set("bench_cfg", 0, struct.pack("<I", proc.pid))
        assert proc.stdin is not None
        proc.stdin.write(b"g")
        proc.stdin.close()
        return proc

    def close(self) -> None:
        self.ring.close()
        self.obj.close()


class SeqCheck:
    """Sequence numbers strictly increasing (one producer CPU); count the gaps.

    A record is either received or counted as dropped by the producer, so the
    run is consistent when the gaps equal the producer's drop count.
    """

    def __init__(self) -> None:
        self.next = 0
        self.ordered = True
        self.count = 0
        self.missing = 0

    def add(self, ev: np.ndarray) -> None:
        seq = ev["bytes"].astype(np.int64)
        n = len(seq)
        if n == 0:
            return
        self.count += n
        steps = np.diff(seq)
        if int(seq[0]) < self.next or bool(np.any(steps < 1)):
            self.ordered = False
        self.missing += int(seq[0]) - self.next + int((steps - 1).sum())
        self.next = int(seq[-1]) + 1

    def consistent(self, attempted: int, dropped: int) -> bool:
        tail = attempted - self.next  # lost after the last record received
        return self.ordered and self.missing + tail == dropped and self.count + dropped == attempted


def _writer(db: Path) -> tuple[EventWriter, int]:
    conn = connect_writer(db)
    info = SessionInfo(
        uuid=f"bench-{time.time_ns()}",
        node="bench",
        hostname=socket.gethostname(),
        kernel=platform.release(),
        gpuscope_version="bench",
        libbpf_version="",
        started_wall_ns=time.time_ns(),
        started_mono_ns=time.monotonic_ns(),
        argv=["bench/drain"],
        flags={},
    )
    sid = create_session(conn, info)
    return EventWriter(conn, sid), sid


def measure(prod: Producer, rate: float, duration_s: float, db: Path | None) -> Point:
    """Run one paced point; drain to numpy only, or through EventWriter into ``db``."""
    writer, sid = _writer(db) if db is not None else (None, 0)
    check = SeqCheck()
    cpu0 = os.times()
    t0 = time.monotonic()
    gen = prod.start(rate, duration_s)
    done = False
    last = t0
    max_gap = 0.0
    while True:
        now = time.monotonic()
        max_gap, last = max(max_gap, now - last), now
        ev = prod.ring.read()
        if len(ev):
            check.add(ev)
            if writer is not None:
                writer.put(ev)
            continue
        if done:
            break
        # Read once more after the generator exits: its last burst is in.
        done = gen.poll() is not None
        if not done:
            time.sleep(POLL_INTERVAL_S)
    t_prod_end = time.monotonic()
    stored = -1
    if writer is not None:
        writer.close()
        stored = writer.rows_written
    t_end = time.monotonic()
    cpu1 = os.times()
    out = gen.stdout.read().decode() if gen.stdout else ""
    gen.wait()
    fields = dict(kv.split("=", 1) for kv in out.split())
    elapsed_s = int(fields.get("elapsed_ns", "0")) / 1e9 or (t_prod_end - t0)
    attempted, dropped = prod.counts()
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    if writer is not None and db is not None:
        writer._conn.close()
        _ = sid
    return Point(
        offered=rate,
        produced=attempted / elapsed_s if elapsed_s else 0.0,
        attempted=attempted,
        received=check.count,
        dropped=dropped,
        seq_ok=check.consistent(attempted, dropped),
        cpu_pct=100.0 * cpu / max(t_end - t0, 1e-9),
        max_gap_ms=max_gap * 1e3,
        stored=stored,
        tail_s=t_end - t_prod_end,
        duration_s=duration_s,
    )


def _point_note(p: Point) -> str:
    parts = [
        f"produced {fmt_rate(p.produced)}",
        f"{p.dropped} dropped" if p.dropped else "0 dropped",
        "seq ok" if p.seq_ok else "SEQ MISMATCH",
        f"consumer CPU {p.cpu_pct:.0f}%",
        f"max read gap {p.max_gap_ms:.0f} ms",
    ]
    if p.stored >= 0:
        parts.append(f"stored {p.stored}/{p.attempted}, writer tail {p.tail_s:.2f}s")
    return ", ".join(parts)


def run(quick: bool = False) -> list[Result]:
    """Sweep offered rates, without and with SQLite; report the best passing point of each."""
    if quick:
        agent_rates, store_rates, agent_s, store_s = [1e6, 2e6, 4e6], [300e3, 400e3, 500e3], 2.0, 3.0
    else:
        agent_rates, store_rates = [1e6, 2e6, 4e6, 6e6, 8e6], [200e3, 300e3, 400e3, 500e3, 600e3]
        agent_s, store_s = 5.0, 8.0
    # producer.bpf.c writes the header's layout; the reader decodes the mirror's.
    include, layout_note = events_include_for_wire()
    rows: list[Result] = []
    load_before = Path("/proc/loadavg").read_text().split()[0]
    prod = Producer(include)
    pin_to(CONSUMER_CPU)
    try:
        best = 0.0
        for rate in agent_rates:
            p = measure(prod, rate, agent_s, None)
            rows.append(
                Result(
                    "drain kernel->agent",
                    f"offered {fmt_rate(rate)}",
                    "pass" if p.passed else "FAIL",
                    "",
                    _point_note(p),
                )
            )
            if p.passed:
                best = max(best, rate)
        verdict = "ok" if best >= TARGET_AGENT else "MISSED"
        rows.append(
            Result(
                "drain kernel->agent",
                "max zero-drop rate (offered)",
                fmt_rate(best),
                f">= {fmt_rate(TARGET_AGENT)}",
                f"{verdict}; {agent_s:.0f} s per point",
            )
        )
        best = 0.0
        with tempfile.TemporaryDirectory(prefix="gpuscope-bench-", dir="/var/tmp") as tmp:
            for i, rate in enumerate(store_rates):
                p = measure(prod, rate, store_s, Path(tmp) / f"drain{i}.db")
                rows.append(
                    Result(
                        "drain kernel->SQLite",
                        f"offered {fmt_rate(rate)}",
                        "pass" if p.passed else "FAIL",
                        "",
                        _point_note(p),
                    )
                )
                if p.passed:
                    best = max(best, rate)
        verdict = "ok" if best >= TARGET_STORE else "MISSED"
        rows.append(
            Result(
                "drain kernel->SQLite",
                "max sustained rate (offered)",
                fmt_rate(best),
                f">= {fmt_rate(TARGET_STORE)}",
                f"{verdict}; {store_s:.0f} s per point, WAL on /var/tmp",
            )
        )
    finally:
        prod.close()
        unpin()
    rows.append(
        Result(
            "drain",
            "(setup)",
            "",
            "",
            f"{RING_BYTES >> 20} MiB ring, {PER_CALL} records per trigger, producer CPU{PRODUCER_CPU}, "
            f"consumer CPU{CONSUMER_CPU}; 1-min load {load_before} before, "
            f"{Path('/proc/loadavg').read_text().split()[0]} after" + (f"; {layout_note}" if layout_note else ""),
        )
    )
    return rows
