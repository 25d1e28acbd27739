"""Benchmark `gpuscope explain` over generated databases of 1M and 10M events.

Usage: python bench/explain_bench.py [--sizes 1000000,10000000] [--mix hard|training] [--dir DIR] [--keep] [--no-aggregates]
                                    [--no-blocks] [--repeat N] [--compare-rows]

Events are generated inside SQLite with a recursive CTE (no Python loop per
row): one traced process with four threads and a second process sharing the
GPU, cycling through ten events: three launches and a cuLaunchKernel, an
async copy, a synchronous copy, a sync, a malloc, a free, and a voluntary or
involuntary sched_switch. That is a hard mix for explain, not a typical one:
60% of the rows are of kinds it reads one by one (syncs, copies, allocations,
off-CPU intervals), where a PyTorch training step is mostly launches (see
docs/gpu-validation.md: 33 syncs and 66 cudaMalloc among 30k calls); ``--mix
training`` generates that shape instead (_STEP). Each size
is analysed in a fresh subprocess so peak RSS (ru_maxrss) is that run's own;
the time is explain_db's, from its call to the report, with freed memory kept
as the command keeps it. `gpuscope explain --db FILE` as typed (interpreter
start-up and imports included) is timed beside it; the three measures rotate
every repetition. The kernel time of each run is printed too: on a VM it is
what moves most from run to run.
Every row is stored (as with ``--record-all``) and, like a real recording,
``event_aggregates`` counts every event (computed with numpy from the same
formulas); ``--no-aggregates`` leaves them out, as in files older than them.
Like trace's writer, the generator writes the column blocks explain reads
(``gpuscope.store.blocks``); ``--no-blocks`` leaves them out, as in files
older than them, which are read row by row.
Prints numbers; asserts nothing.

Measured on a 2-CPU VM, 2026-11-27, shortly after midnight (the full table and what is left:
docs/explain.md, Performance):

    file          explain (explain_db)               as typed             one aggregate scan
    hard 1M       0.16 s, 123 MiB                    0.32-0.39 s          0.32 s
    hard 10M      0.88-1.86 s (median 1.12), 743 MiB 1.05-2.01 s          3.26 s
    training 1M   0.11 s, 98 MiB                     0.25-0.34 s          0.26 s
    training 10M  0.50 s, 115 MiB                    0.57-0.66 s          3.11 s
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from benchlib import cached_bytecode_env

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op
from gpuscope.store.aggregates import Aggregator, insert_aggregates
from gpuscope.store.blocks import build_blocks
from gpuscope.store.connect import connect_writer
from gpuscope.store.retention import build_indexes

_GEN = f"""
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < :n - 1)
INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, bytes,
                      handle, stream, arg0, arg1)
SELECT :sid,
       1000000000 + i * 5000,
       CASE i % 10
            WHEN 0 THEN 3000 + (i * 7919) % 2000
            WHEN 9 THEN 1500000 + (i * 104729) % 300000 + CASE WHEN i % 997 = 9 THEN 20000000 ELSE 0 END
            WHEN 8 THEN 40000 + (i * 31) % 5000
            ELSE 2000 + (i * 13) % 1000 END,
       CASE WHEN i % 50 = 7 THEN 4243 ELSE 4242 END,
       CASE WHEN i % 50 = 7 THEN 4243 ELSE 4242 + (i / 10) % 4 END,
       1, 77,
       CASE i % 10
            WHEN 0 THEN {int(Op.cudaMalloc)} WHEN 1 THEN {int(Op.cudaFree)} WHEN 2 THEN {int(Op.cudaMemcpyAsync)}
            WHEN 3 THEN {int(Op.cudaLaunchKernel)} WHEN 4 THEN {int(Op.cudaLaunchKernel)}
            WHEN 5 THEN {int(Op.cudaLaunchKernel)} WHEN 6 THEN {int(Op.cuLaunchKernel)}
            WHEN 7 THEN {int(Op.sched_switch)} WHEN 8 THEN {int(Op.cudaMemcpy)}
            ELSE {int(Op.cudaStreamSynchronize)} END,
       0, 0,
       CASE i % 10 WHEN 0 THEN 1048576 WHEN 2 THEN 65536 WHEN 8 THEN 262144 ELSE 0 END,
       CASE i % 10 WHEN 0 THEN 140000000000 + (i / 10) * 4096 WHEN 1 THEN 140000000000 + ((i / 10) - 1) * 4096
            WHEN 7 THEN (99 << 32) | 99 ELSE 4096 + (i % 7) END,
       CASE i % 10 WHEN 7 THEN 88 ELSE 20817 END,
       CASE i % 10 WHEN 7 THEN (i / 10) % 2 WHEN 2 THEN 1 WHEN 8 THEN 2 ELSE 0 END,
       CASE i % 10 WHEN 7 THEN CASE (i / 10) % 2 WHEN 1 THEN 0 ELSE 1 END ELSE 0 END
FROM seq
"""


# A training step of 1000 events (5 ms), in the shares of a real PyTorch run (docs/gpu-validation.md: launches
# through both layers, cuBLAS's cuLaunchKernelEx, memsets, async copies, one sync a step), plus one off-CPU
# interval a step; one step in 50 is a second process's. Per kind: the step's events below ``upto``, the op,
# duration = base + (i * mult) % mod, bytes.
_STEP = (
    (390, Op.cudaLaunchKernel, (2000, 13, 1000), 0),
    (780, Op.cuLaunchKernel, (2000, 13, 1000), 0),
    (880, Op.cuLaunchKernelEx, (2500, 17, 1000), 0),
    (902, Op.cudaMemcpyAsync, (3000, 7, 2000), 65536),
    (938, Op.cudaMemsetAsync, (2500, 11, 500), 4096),
    (998, Op.cuMemsetD8Async, (2000, 11, 500), 4096),
    (999, Op.cudaStreamSynchronize, (2_000_000, 104729, 300_000), 0),
    (1000, Op.sched_switch, (2000, 13, 1000), 0),
)


def _step_case(value: Callable[[tuple[int, Op, tuple[int, int, int], int]], str]) -> str:
    """A SQL CASE over the step's kinds, each giving ``value(kind)``."""
    return "CASE " + " ".join(f"WHEN i % 1000 < {kind[0]} THEN {value(kind)}" for kind in _STEP) + " END"


_GEN_TRAINING = f"""
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < :n - 1)
INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, bytes,
                      handle, stream, arg0, arg1)
SELECT :sid, 1000000000 + i * 5000, {_step_case(lambda k: f"{k[2][0]} + (i * {k[2][1]}) % {k[2][2]}")},
       CASE WHEN (i / 1000) % 50 = 7 THEN 4243 ELSE 4242 END, CASE WHEN (i / 1000) % 50 = 7 THEN 4243 ELSE 4242 END,
       1, 77, {_step_case(lambda k: str(int(k[1])))}, 0, 0, {_step_case(lambda k: str(k[3]))},
       CASE WHEN i % 1000 = 999 THEN (99 << 32) | 99 WHEN i % 1000 < 780 THEN 4096 + i % 97
            WHEN i % 1000 < 880 THEN 8192 + i % 31 ELSE 0 END,
       CASE WHEN i % 1000 = 999 THEN 88 ELSE 20817 END,
       CASE WHEN i % 1000 = 999 THEN (i / 1000) % 2 WHEN i % 1000 >= 880 AND i % 1000 < 902 THEN 1 ELSE 0 END,
       CASE WHEN i % 1000 = 999 THEN 1 - (i / 1000) % 2 ELSE 0 END
FROM seq
"""


def _training_columns(i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(op, duration, pid, bytes) of events ``i`` of the training mix: _GEN_TRAINING's formulas, in numpy."""
    kind = np.searchsorted(np.array([k[0] for k in _STEP]), i % 1000, side="right")
    op = np.array([int(k[1]) for k in _STEP], dtype=np.uint16)[kind]
    base, mult, mod = (np.array([k[2][j] for k in _STEP], dtype=np.int64)[kind] for j in range(3))
    dur = base + (i * mult) % mod
    nbytes = np.array([k[3] for k in _STEP], dtype=np.int64)[kind]
    pid = np.where((i // 1000) % 50 == 7, 4243, 4242)
    return op, dur, pid, nbytes


def _aggregate(conn: sqlite3.Connection, sid: int, n: int, mix: str) -> None:
    """Write the exact aggregates of the generated events: the _GEN (or _GEN_TRAINING) formulas, in numpy."""
    agg = Aggregator(sid)
    for lo in range(0, n, 1_000_000):
        i = np.arange(lo, min(n, lo + 1_000_000), dtype=np.int64)
        ev = np.zeros(len(i), dtype=EVENT_DTYPE)
        ev["ts_ns"] = 1_000_000_000 + i * 5000
        if mix == "training":
            ev["op"], ev["duration_ns"], ev["pid"], ev["bytes"] = _training_columns(i)
            agg.add(ev, np.ones(len(i), dtype=bool))
            continue
        k = i % 10
        dur = 2000 + (i * 13) % 1000
        dur = np.where(k == 0, 3000 + (i * 7919) % 2000, dur)
        dur = np.where(k == 9, 1_500_000 + (i * 104729) % 300_000 + np.where(i % 997 == 9, 20_000_000, 0), dur)
        dur = np.where(k == 8, 40000 + (i * 31) % 5000, dur)
        ev["duration_ns"] = dur
        ev["pid"] = np.where(i % 50 == 7, 4243, 4242)
        ops = [
            Op.cudaMalloc,
            Op.cudaFree,
            Op.cudaMemcpyAsync,
            Op.cudaLaunchKernel,
            Op.cudaLaunchKernel,
            Op.cudaLaunchKernel,
            Op.cuLaunchKernel,
            Op.sched_switch,
            Op.cudaMemcpy,
            Op.cudaStreamSynchronize,
        ]
        ev["op"] = np.array([int(o) for o in ops], dtype=np.uint16)[k]
        ev["bytes"] = np.select([k == 0, k == 2, k == 8], [1_048_576, 65536, 262_144], 0)
        agg.add(ev, np.ones(len(i), dtype=bool))
    insert_aggregates(conn, agg.take())


def generated(folder: str | Path, stem: str, n: int) -> Path:
    """``folder/stem-n.db``, generated (the hard mix) unless a previous run left it there."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    db = path / f"{stem}-{n}.db"
    if not db.exists():
        print(f"generating {n:,} events …", file=sys.stderr)
        generate(db, n)
    return db


def generate(path: Path, n: int, aggregates: bool = True, blocks: bool = True, mix: str = "hard") -> float:
    """Create a database with n generated events of ``mix`` (hard, training); return seconds taken."""
    if path.exists():
        path.unlink()
    t0 = time.perf_counter()
    conn = connect_writer(path)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute(
        "INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns, stopped_mono_ns, events_recorded) "
        "VALUES ('bench', 'bench', 1700000000000000000, 1000000000, ?, ?)",
        (1_000_000_000 + n * 5000, n),
    )
    sid = conn.execute("SELECT max(id) FROM sessions").fetchone()[0]
    conn.execute("INSERT INTO comms(id, comm) VALUES (1, 'python')")
    conn.executemany(
        "INSERT INTO processes(session_id, pid, comm, cgroup_id, first_seen_ns) VALUES (?, ?, ?, 77, 0)",
        [(sid, 4242, "train.py"), (sid, 4243, "infer.py"), (sid, 99, "stress")],
    )
    conn.execute("BEGIN")
    conn.execute(_GEN_TRAINING if mix == "training" else _GEN, {"n": n, "sid": sid})
    if aggregates:
        _aggregate(conn, sid, n, mix)
    if blocks:
        build_blocks(conn)  # what trace's writer writes beside its rows
    conn.execute("COMMIT")
    build_indexes(conn)  # as a session's end does: every closed recording has its time index
    conn.close()
    return time.perf_counter() - t0


def aggregate_scan_s(path: Path) -> float:
    """The yardstick: one aggregate scan of every row by SQLite, as a user would type it."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        t0 = time.perf_counter()
        conn.execute(
            "SELECT op_id, count(*), sum(duration_ns), max(duration_ns) FROM event_log GROUP BY op_id"
        ).fetchall()
        return time.perf_counter() - t0
    finally:
        conn.close()


_MEASURE = """
import json, resource, sys, time
from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.bpf.libbpf import keep_freed_memory
keep_freed_memory()  # as the explain command does
t0 = time.perf_counter()
report = explain_db(sys.argv[1], ExplainOptions())
dt = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
rss = ru.ru_maxrss * 1024
print(json.dumps({"seconds": dt, "peak_rss_bytes": rss, "events": report.window.events, "sys_s": ru.ru_stime,
                  "stats_from": report.stats_from, "report": report.as_dict(per_process=True),
                  "findings": [f.kind for f in report.findings]}, default=str))
"""


def _explain(db: Path) -> dict[str, Any]:
    """explain_db in a fresh process, timed from its call (its peak RSS is the process's own)."""
    p = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(db)], capture_output=True, text=True, check=False, env=dict(os.environ)
    )
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    out: dict[str, Any] = json.loads(p.stdout)
    return out


def _command_s(db: Path) -> tuple[float, float]:
    """Wall seconds of `gpuscope explain --db DB` as typed: interpreter start, imports, analysis, the report.

    Bytecode is cached like an installed wheel's (bench/.build/pycache), even
    where PYTHONDONTWRITEBYTECODE is set; the report goes to /dev/null.
    """
    env = cached_bytecode_env()
    sys0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "explain", "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        env=env,
    )
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime - sys0


def _listed(runs: list[tuple[float, float]], after_scan: list[bool]) -> str:
    """Each run's seconds, its kernel seconds, and whether the full-file scan ran just before it."""
    return ", ".join(
        f"{t:.2f} ({k:.2f}{', after the scan' if a else ''})" for (t, k), a in zip(runs, after_scan, strict=True)
    )


def _without_blocks(db: Path) -> Path:
    """A copy of ``db`` without its column blocks: explain reads its rows, as for a file older than them."""
    copy = db.with_name(db.stem + "_rowpath.db")
    shutil.copy(db, copy)
    conn = sqlite3.connect(copy)
    conn.execute("DELETE FROM event_blocks")
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    return copy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    # Under bench/.build (ignored by git), not /tmp: the 10M-event file is gigabytes, kept for --keep.
    ap.add_argument("--dir", default=str(Path(__file__).resolve().parent / ".build" / "explain"))
    ap.add_argument("--keep", action="store_true", help="reuse existing databases of the same size")
    ap.add_argument("--no-aggregates", action="store_true", help="rows only, as in files recorded before aggregates")
    ap.add_argument("--no-blocks", action="store_true", help="no column blocks, as in files older than them")
    ap.add_argument(
        "--mix",
        choices=("hard", "training"),
        default="hard",
        help="hard: 60%% of rows read one by one (the default); training: a PyTorch step's shares, mostly launches",
    )
    ap.add_argument("--repeat", type=int, default=5, help="runs of explain and of the scan, interleaved (medians)")
    ap.add_argument(
        "--compare-rows", action="store_true", help="also explain a copy without blocks: the same report, and its time"
    )
    args = ap.parse_args()
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for n in (int(s) for s in args.sizes.split(",")):
        mix = "" if args.mix == "hard" else f"_{args.mix}"
        db = out / f"explain_{n}{mix}{'_rows' if args.no_aggregates else ''}{'_noblocks' if args.no_blocks else ''}.db"
        if not (args.keep and db.exists()):
            gen_s = generate(db, n, not args.no_aggregates, not args.no_blocks, args.mix)
            print(f"generated {n:,} events in {gen_s:.1f} s ({db.stat().st_size / 2**20:.0f} MiB)", flush=True)
        runs, scans, commands = [], [], []
        _command_s(db)  # caches the bytecode
        # Each repetition in another of the six orders, so that each measure follows each of the others
        # as often: what ran just before matters on a VM (a run after the scan, which reads the whole file
        # through the page cache, pays seconds of page faults that a run after an explain does not).
        orders = list(itertools.permutations(range(3)))
        after_scan: dict[int, list[bool]] = {0: [], 2: []}  # per explain and command run: did the scan run just before
        last = -1
        for rep in range(max(1, args.repeat)):
            for which in orders[rep % len(orders)]:
                if which == 0:
                    runs.append(_explain(db))
                elif which == 1:
                    scans.append(aggregate_scan_s(db))
                else:
                    commands.append(_command_s(db))
                if which != 1:
                    after_scan[which].append(last == 1)
                last = which
        r = runs[0]
        secs = sorted(x["seconds"] for x in runs)
        scan = statistics.median(scans)
        rss = max(x["peak_rss_bytes"] for x in runs)
        print(
            f"explain {r['events']:>11,} events ({r['stats_from']}): median {statistics.median(secs):.2f} s "
            f"(min {secs[0]:.2f}, max {secs[-1]:.2f}, {len(secs)} runs), peak RSS {rss / 2**20:.0f} MiB, "
            f"findings {r['findings']}; one aggregate scan median {scan:.2f} s (min {min(scans):.2f}): "
            f"explain/scan {statistics.median(secs) / scan:.2f}x (target <= 1.0x)",
            flush=True,
        )
        command = statistics.median(c for c, _ in commands)
        print(
            f"  `gpuscope explain` as typed (start-up, imports, report): median {command:.2f} s "
            f"(min {min(c for c, _ in commands):.2f}, max {max(c for c, _ in commands):.2f}): "
            f"command/scan {command / scan:.2f}x",
            flush=True,
        )

        # Time in the kernel (mostly page faults of fresh memory) is what moves most from run to run on a VM.
        print(f"  each run, s (kernel s): explain {_listed([(x['seconds'], x['sys_s']) for x in runs], after_scan[0])}")
        print(f"  command {_listed(commands, after_scan[2])}", flush=True)
        if args.compare_rows:
            rows = _explain(_without_blocks(db))
            same = "the same report" if rows["report"] == r["report"] else "A DIFFERENT REPORT"
            print(f"  without blocks (rows read one by one): {rows['seconds']:.2f} s, {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
