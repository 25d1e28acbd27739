"""The writer's rate under `--max-db`: rows a second stored by EventWriter under a size cap, beside no cap.

Under a small cap every transaction is followed by a checkpoint and deletions
of the oldest rows, so the writer is slower than without one; when it falls
below what the traced processes make, the agent's ring overflows. Each
configuration is the session's own (SizeCap decides the transaction size and
whether column blocks are kept), fed the same batches of 4,000 synthetic rows;
the figure is rows a second of the whole run, closing included, and its ratio
to the uncapped writer in the same round. Rounds are interleaved; medians.

Usage: .venv/bin/python bench/cap_bench.py [--caps 0,2m,64m] [--rows 400000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.commands._options import size_bytes
from gpuscope.store.connect import connect_writer
from gpuscope.store.retention import SizeCap
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import Durability, EventWriter

BATCH = 4_000


def batches(rows: int) -> list[np.ndarray]:
    """Launch-like rows of two threads: a few ops, short durations, 40-bit handles."""
    rng = np.random.default_rng(1)
    out = []
    for i in range(rows // BATCH):
        ev = np.zeros(BATCH, dtype=EVENT_DTYPE)
        ev["ts_ns"] = i * 10_000_000 + np.sort(rng.integers(0, 10_000_000, BATCH))
        ev["duration_ns"] = rng.integers(0, 30_000, BATCH)
        ev["pid"] = 10
        ev["tid"] = 100 + rng.integers(0, 2, BATCH)
        ev["op"] = rng.integers(1, 12, BATCH)
        ev["handle"] = rng.integers(0, 1 << 40, BATCH, dtype=np.uint64)
        ev["comm"] = b"cuda_calls"
        out.append(ev)
    return out


def run_once(cap: int, data: list[np.ndarray], folder: Path) -> tuple[float, int, bool]:
    """(rows a second, rows deleted by the cap, blocks kept) for one writer over ``data``."""
    path = folder / f"cap-{cap}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = connect_writer(path)
    size_cap = SizeCap(path, cap)
    size_cap.configure(conn)
    sid = create_session(conn, SessionInfo("bench", "n", "h", "6.8", "0", "1", 10**18, 0, [], {}))
    box: list[EventWriter] = []

    def after(c: sqlite3.Connection) -> None:
        box[0].shed = size_cap.check(c)  # as the session does after each commit

    rows_per_commit = size_cap.rows_per_commit(Durability().rows_per_commit)
    writer = EventWriter(
        conn, sid, durability=Durability(rows_per_commit=rows_per_commit), after_commit=after, blocks=size_cap.blocks
    )
    box.append(writer)
    t0 = time.perf_counter()
    for ev in data:
        writer.put(ev)
    writer.close()
    elapsed = time.perf_counter() - t0
    conn.close()
    return sum(len(b) for b in data) / elapsed, size_cap.rows_deleted, size_cap.blocks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", default="0,2m,64m", help="comma-separated --max-db sizes (0 = no cap; always run)")
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    caps = sorted({0, *(size_bytes("--caps", c) for c in args.caps.split(","))})
    data = batches(args.rows)
    rates: dict[int, list[float]] = {c: [] for c in caps}
    ratios: dict[int, list[float]] = {c: [] for c in caps}
    notes: dict[int, tuple[int, bool]] = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        for _ in range(args.repeat):
            base = 0.0
            for cap in caps:
                rate, deleted, blocks = run_once(cap, data, Path(d))
                base = rate if cap == 0 else base
                rates[cap].append(rate)
                ratios[cap].append(rate / base)
                notes[cap] = (deleted, blocks)
    print(f"{'--max-db':>9} {'rows/s':>10} {'x no cap':>9} {'deleted':>9} blocks")
    for cap in caps:
        deleted, blocks = notes[cap]
        label = "none" if cap == 0 else f"{cap >> 20}m"
        print(
            f"{label:>9} {statistics.median(rates[cap]) / 1e3:>9.0f}k {statistics.median(ratios[cap]):>9.2f}"
            f" {deleted:>9,} {'yes' if blocks else 'no'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
