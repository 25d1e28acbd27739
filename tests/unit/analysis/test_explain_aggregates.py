"""explain reads counts, rates and percentiles from the exact aggregates, whatever the storage mode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpuscope.agent.storage_policy import StoragePolicy
from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.cli import main
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from gpuscope.model.session_choice import EVERY_SESSION
from gpuscope.store.aggregates import INSERT_AGGREGATES, Aggregator
from gpuscope.store.connect import connect_writer

from .builder import MS, US, Events

S = 1_000_000_000
PID = 100
# The event_log columns the test writes, in the order of its INSERT.
_STORED = ("ts_ns", "duration_ns", "pid", "tid", "op", "bytes", "handle", "arg0", "arg1")


def _workload(seconds: int = 24) -> np.ndarray:
    """A training loop: 8 launches, a copy and a sync every 2 ms, one slow sync a second, a preemption or two."""
    rng = np.random.default_rng(7)
    steps = seconds * 500
    per = 11
    ev = np.zeros(steps * per, dtype=EVENT_DTYPE)
    t0 = np.arange(steps, dtype=np.int64) * 2 * MS + S
    for k in range(8):
        sl = ev[k::per]
        sl["ts_ns"] = t0 + k * 20 * US
        sl["duration_ns"] = rng.integers(3 * US, 6 * US, steps) + (rng.random(steps) < 0.002) * 400 * US
        sl["op"] = int(Op.cudaLaunchKernel)
        sl["handle"] = 0xA0 + k
    cp = ev[8::per]
    cp["ts_ns"], cp["duration_ns"], cp["op"], cp["bytes"] = (
        t0 + 200 * US,
        rng.integers(40 * US, 60 * US, steps),
        int(Op.cudaMemcpyAsync),
        1 << 20,
    )
    sy = ev[9::per]
    sy["ts_ns"] = t0 + 300 * US
    sy["duration_ns"] = rng.integers(500 * US, 700 * US, steps) + (np.arange(steps) % 500 == 3) * 20 * MS
    sy["op"] = int(Op.cudaStreamSynchronize)
    sw = ev[10::per]  # voluntary off-CPU slices between steps
    sw["ts_ns"], sw["duration_ns"], sw["op"], sw["arg1"] = t0 + 1500 * US, 100 * US, int(Op.sched_switch), 1
    ev["pid"] = PID
    ev["tid"] = PID
    ev["comm"] = b"train"
    return np.sort(ev, order="ts_ns", kind="stable")


def _record(path: Path, ev: np.ndarray, record_all: bool) -> Path:
    """Store ``ev`` as a trace would: the policy picks rows, the aggregator counts every event."""
    conn = connect_writer(path)
    conn.execute(
        "INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns) VALUES ('t', 'n', 1700000000000000000, ?)",
        (S,),
    )
    conn.execute("INSERT INTO comms(id, comm) VALUES (1, 'train')")
    conn.execute("INSERT INTO processes(session_id, pid, comm, first_seen_ns) VALUES (1, ?, 'train', 0)", (PID,))
    policy = StoragePolicy(record_all=record_all, start_ns=S)
    agg = Aggregator(1)
    per_op: dict[int, LatencyHistogram] = {}
    conn.execute("BEGIN")
    for lo in range(0, len(ev), 4096):  # batches, like ring-buffer polls
        batch = ev[lo : lo + 4096]
        keep = policy.keep(batch, per_op)
        agg.add(batch, keep)
        for op in np.unique(batch["op"]).tolist():
            per_op.setdefault(op, LatencyHistogram.empty()).add(
                batch["duration_ns"][batch["op"] == op].astype(np.int64)
            )
        kept = batch[keep]
        conn.executemany(
            "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
            "bytes, handle, stream, arg0, arg1) VALUES (1, ?, ?, ?, ?, 1, 0, ?, 0, 0, ?, ?, 0, ?, ?)",
            [tuple(int(x) for x in r) for r in zip(*(kept[name] for name in _STORED), strict=True)],
        )
    conn.executemany(INSERT_AGGREGATES, agg.take())
    conn.execute("COMMIT")
    conn.close()
    return path


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    ev = _workload()
    d = tmp_path_factory.mktemp("modes")
    return _record(d / "selective.db", ev, False), _record(d / "all.db", ev, True)


def _explain(capsys: pytest.CaptureFixture[str], db: Path) -> dict[str, object]:
    assert main(["explain", "--db", str(db), "--json", "--per-process"]) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def _rows(db: Path) -> int:
    conn = connect_writer(db)
    try:
        return int(conn.execute("SELECT count(*) FROM event_log").fetchone()[0])
    finally:
        conn.close()


def test_selective_and_record_all_give_identical_stats(
    dbs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # given the same workload stored selectively (far fewer rows) and with --record-all
    selective, record_all = dbs
    assert _rows(selective) < 0.6 * _rows(record_all)
    # when explained
    a, b = _explain(capsys, selective), _explain(capsys, record_all)
    # then counts, percentiles, shares and rates are identical, and exact
    assert a["stats_from"] == b["stats_from"] == "aggregates"
    assert a["stats"] == b["stats"]
    assert a["window"] == b["window"]
    keys = ("op", "pid", "count", "total_ns", "p50_ns", "p95_ns", "p99_ns", "max_ns")
    rows_a, rows_b, stats_a = a["per_process"], b["per_process"], a["stats"]
    assert isinstance(rows_a, list) and isinstance(rows_b, list) and isinstance(stats_a, list)
    per_a = [{k: s[k] for k in keys} for s in rows_a]
    per_b = [{k: s[k] for k in keys} for s in rows_b]
    assert per_a == per_b
    counts = {s["op"]: s["count"] for s in stats_a}
    assert counts == {"cudaLaunchKernel": 8 * 12_000, "cudaMemcpyAsync": 12_000, "cudaStreamSynchronize": 12_000}


def test_selective_and_record_all_give_the_same_findings(dbs: tuple[Path, Path]) -> None:
    selective, record_all = dbs
    a = explain_db(selective, ExplainOptions())
    b = explain_db(record_all, ExplainOptions())
    assert [(f.kind, f.symptom.pid, f.symptom.op, f.symptom.count) for f in a.findings] == [
        (f.kind, f.symptom.pid, f.symptom.op, f.symptom.count) for f in b.findings
    ]


def test_percentiles_from_aggregates_are_within_a_histogram_bucket_of_exact(dbs: tuple[Path, Path]) -> None:
    _, record_all = dbs
    ev = _workload()
    report = explain_db(record_all, ExplainOptions())
    for s in report.stats:
        d = ev["duration_ns"][ev["op"] == int(getattr(Op, s.op))].astype(np.int64)
        for p, got in ((50, s.p50_ns), (99, s.p99_ns)):
            exact = int(np.percentile(d, p, method="inverted_cdf"))
            assert abs(got - exact) <= 0.045 * exact, (s.op, p, got, exact)
        assert s.max_ns == int(d.max())
        assert s.total_ns == int(d.sum())


def test_a_database_without_aggregates_falls_back_to_rows(tmp_path: Path) -> None:
    ev = Events()
    ev.loop(Op.cudaStreamSynchronize, 20, 10 * MS, 50 * US)
    report = explain_db(ev.to_db(tmp_path / "old.db"), ExplainOptions())
    assert report.stats_from == "events"
    assert report.stats[0].count == 20
    assert report.stats[0].p50_ns == 50 * US


def _leaky(ev: Events) -> None:
    for i in range(40):
        ev.add(Op.cudaMalloc, i * 100 * MS, 20 * US, nbytes=64 << 20, handle=0x7000 + i)


def test_memory_leak_is_not_reported_on_an_ingero_import(tmp_path: Path) -> None:
    # given allocations without frees, from a recorder that never records frees
    ev = Events()
    _leaky(ev)
    db = ev.to_db(tmp_path / "imported.db")
    conn = connect_writer(db)
    conn.execute("UPDATE sessions SET flags = ?", (json.dumps({"imported_from": "ingero"}),))
    conn.close()
    # then no leak is claimed
    assert "memory-leak" not in [f.kind for f in explain_db(db, ExplainOptions()).findings]


def test_memory_leak_is_still_reported_on_a_native_recording(tmp_path: Path) -> None:
    ev = Events()
    _leaky(ev)
    db = ev.to_db(tmp_path / "native.db")
    assert "memory-leak" in [f.kind for f in explain_db(db, ExplainOptions()).findings]


def test_a_sessions_window_counts_none_of_the_calls_of_a_session_in_the_same_second(tmp_path: Path) -> None:
    # given session 1 (pid 100: 400 cudaMalloc) ending at 2.5 s and session 2 (pid 200: 300 launches) starting
    # at 2.6 s: both have calls in the second that starts at 2 s
    conn = connect_writer(tmp_path / "two.db")
    conn.execute("INSERT INTO comms(id, comm) VALUES (1, 'train')")
    spans = {
        1: (S, S + 2500 * MS, 100, Op.cudaMalloc, 400),
        2: (S + 2600 * MS, S + 4 * S, 200, Op.cudaLaunchKernel, 300),
    }
    for sid, (start, stop, pid, op, n) in spans.items():
        conn.execute(
            "INSERT INTO sessions(id, uuid, node, started_wall_ns, started_mono_ns, stopped_mono_ns) "
            "VALUES (?, ?, 'n', ?, ?, ?)",
            (sid, f"s{sid}", 1_700_000_000 * S + start, start, stop),
        )
        ev = np.zeros(n, dtype=EVENT_DTYPE)
        ev["ts_ns"] = start + 10 * MS + np.arange(n, dtype=np.int64) * ((stop - start - 20 * MS) // n)
        ev["duration_ns"], ev["op"], ev["pid"], ev["tid"] = 50 * US, int(op), pid, pid
        agg = Aggregator(sid)
        agg.add(ev, np.ones(n, dtype=bool))
        conn.executemany(INSERT_AGGREGATES, agg.take())
        conn.executemany(
            "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
            "bytes, handle, stream, arg0, arg1) VALUES (?, ?, ?, ?, ?, 1, 0, ?, 0, 0, 0, 0, 0, 0, 0)",
            [(sid, int(r["ts_ns"]), int(r["duration_ns"]), pid, pid, int(op)) for r in ev],
        )
    conn.close()
    # when session 2's window is explained (offsets from the start of both sessions read)
    report = explain_db(tmp_path / "two.db", ExplainOptions(from_ns=2610 * MS, to_ns=4 * S, sessions=EVERY_SESSION))
    # then its counts are its own
    assert {s.op: s.count for s in report.stats} == {"cudaLaunchKernel": 300}
    assert report.window.events == 300
