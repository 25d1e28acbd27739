"""gpuscope export --format perfetto: valid Trace Event JSON, filters, markers, streaming in bounded memory."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.export.perfetto import us
from gpuscope.model.ops import Op
from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import EventWriter
from tests.conftest import run_gpuscope

WALL0 = 1_700_000_000_000_000_000
MONO0 = 5_000_000_000


def _events(op: Op, n: int, *, pid: int, tid: int, dur: int, step_ns: int = 1_000_000, start_ns: int = 0) -> np.ndarray:
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["ts_ns"] = MONO0 + start_ns + np.arange(n) * step_ns
    ev["duration_ns"] = dur
    ev["pid"], ev["tid"], ev["op"] = pid, tid, int(op)
    ev["comm"] = b"train.py" if pid == tid else b"loader"
    return ev


def build_db(path: Path, node: str = "node-a", *, findings_table: bool = True) -> Path:
    """Two threads of pid 42 and one of pid 77: CUDA calls, off-CPU intervals, entry-only records."""
    conn = connect_writer(path)
    sid = create_session(conn, SessionInfo("u-" + node, node, "host", "6.18", "0.1", "1.1", WALL0, MONO0, [], {}))
    w = EventWriter(conn, sid)
    w.put(_events(Op.cudaMalloc, 100, pid=42, tid=42, dur=1_234))
    w.put(_events(Op.cudaStreamSynchronize, 100, pid=42, tid=42, dur=400_000, start_ns=10_000))
    switches = _events(Op.sched_switch, 50, pid=42, tid=43, dur=2_000_000, step_ns=2_000_000)
    switches["arg0"][::2] = 1  # every other one preempted
    w.put(switches)
    entry_only = _events(Op.cudaLaunchKernel, 10, pid=77, tid=77, dur=0)
    entry_only["flags"] = 1
    w.put(entry_only)
    w.close()
    if not findings_table:
        conn.execute("DROP TABLE IF EXISTS findings")
    conn.close()
    return path


def export(db: Path, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    p = run_gpuscope("export", "--db", str(db), "-o", str(out), *args)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text()), p.stderr


def assert_valid_trace_event_format(trace: dict[str, Any]) -> None:
    """The checks ui.perfetto.dev's JSON importer and chrome://tracing rely on."""
    assert isinstance(trace["traceEvents"], list)
    named_pids = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    named_threads = {
        (e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"
    }
    for e in trace["traceEvents"]:
        assert {"ph", "pid", "tid", "name"} <= e.keys(), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "thread_name", "process_sort_index"}
            assert e["args"]
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert (e["pid"], e["tid"]) in named_threads
            assert e["pid"] in named_pids
        elif e["ph"] == "i":
            assert e["s"] in {"t", "p", "g"}
        elif e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values())
        elif e["ph"] in {"s", "f"}:
            # v1 flow ends: matched by (id, cat, name); a finish binds to its enclosing slice only with bp=e
            assert isinstance(e["id"], int) and e["cat"] and (e["ph"] == "s" or e["bp"] == "e"), e
            assert (e["pid"], e["tid"]) in named_threads
        else:
            pytest.fail(f"unexpected phase {e['ph']}")


def test_microseconds_keep_every_nanosecond() -> None:
    assert [us(0), us(1), us(1_234), us(1_000_000_000_001), us(-5)] == [
        "0.000",
        "0.001",
        "1.234",
        "1000000000.001",
        "-0.005",
    ]


def test_the_export_is_valid_trace_event_json_with_a_track_per_node_and_thread(tmp_path: Path) -> None:
    trace, stderr = export(build_db(tmp_path / "a.db"), tmp_path / "t.json")
    assert_valid_trace_event_format(trace)
    events = trace["traceEvents"]
    procs = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    threads = sorted(e["args"]["name"] for e in events if e["name"] == "thread_name")
    assert procs == ["node node-a"]
    assert threads == ["loader [42/43]", "train.py [42/42]", "train.py [77/77]"]
    mallocs = [e for e in events if e["name"] == "cudaMalloc"]
    assert len(mallocs) == 100
    first = min(mallocs, key=lambda e: e["ts"])
    assert first["ph"] == "X" and first["ts"] == 0.0 and first["dur"] == 1.234  # µs, ns kept
    assert first["cat"] == "cuda"
    off_cpu = {e["name"] for e in events if e.get("tid") == 43 and e["ph"] == "X"}
    assert off_cpu == {"off-CPU (preempted)", "off-CPU (blocked)"}
    launches = [e for e in events if e["name"] == "cudaLaunchKernel"]
    assert len(launches) == 10 and all(e["ph"] == "i" for e in launches)
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and counters[0]["args"]["cudaMalloc"] == pytest.approx(100.0)
    assert "wrote 260 events" in stderr


def test_max_events_keeps_the_earliest_and_says_what_was_cut(tmp_path: Path) -> None:
    trace, stderr = export(build_db(tmp_path / "a.db"), tmp_path / "t.json", "--max-events", "20")
    calls = [e for e in trace["traceEvents"] if e["ph"] in {"X", "i"}]
    assert len(calls) == 20
    assert max(e["ts"] for e in calls) < 10_000  # the first 10 ms
    assert trace["otherData"]["events_cut"] == 240
    assert "cut 240 later events" in stderr


def test_pid_and_node_filters_limit_the_tracks(tmp_path: Path) -> None:
    db = build_db(tmp_path / "a.db")
    trace, _ = export(db, tmp_path / "t.json", "--pid", "77")
    assert {e["args"]["pid"] for e in trace["traceEvents"] if e["ph"] in {"X", "i"}} == {77}
    trace, _ = export(db, tmp_path / "t.json", "--node", "other")
    assert not [e for e in trace["traceEvents"] if e["ph"] in {"X", "i"}]


def test_stored_findings_become_global_markers_colored_by_severity(tmp_path: Path) -> None:
    db = build_db(tmp_path / "a.db")
    conn = sqlite3.connect(db)
    symptom = json.dumps({"summary": "syncs are slow", "op": "cudaStreamSynchronize"})
    for severity in ("HIGH", "LOW"):
        conn.execute(
            "INSERT INTO findings(session_id, window_start_ns, window_end_ns, severity, kind, finding_id, symptom, "
            "causes, fix, lost_ns, created_at_ns) VALUES (1, ?, ?, ?, 'slow-sync', 'slow-sync-42', ?, '[]', 'fix it', 5, 9)",
            (MONO0 + 1_000_000, MONO0 + 2_000_000, severity, symptom),
        )
    conn.commit()
    conn.close()
    trace, _ = export(db, tmp_path / "t.json")
    assert_valid_trace_event_format(trace)
    markers = [e for e in trace["traceEvents"] if e.get("cat") == "finding"]
    assert [(m["name"], m["cname"], m["s"], m["ts"]) for m in markers] == [
        ("[HIGH] syncs are slow", "bad", "g", 1000.0),
        ("[LOW] syncs are slow", "good", "g", 1000.0),
    ]


def test_a_database_without_a_findings_table_exports_without_markers(tmp_path: Path) -> None:
    trace, stderr = export(build_db(tmp_path / "a.db", findings_table=False), tmp_path / "t.json")
    assert_valid_trace_event_format(trace)
    assert not [e for e in trace["traceEvents"] if e.get("cat") == "finding"]
    assert "no finding markers" in stderr
    # explain stores findings only with --save-findings: "run explain first" would send the user in a circle
    assert "pass --explain" in stderr and "run `gpuscope explain`" not in stderr


def test_the_protobuf_format_is_refused_with_a_remedy(tmp_path: Path) -> None:
    p = run_gpuscope(
        "export", "--db", str(build_db(tmp_path / "a.db")), "-o", str(tmp_path / "t.pb"), "--format", "perfetto-proto"
    )
    assert p.returncode == 2
    assert "fix: use --format perfetto" in p.stderr


_PEAK_RSS = """
import resource, sys
from gpuscope.cli import main
rc = main(["export", "--db", sys.argv[1], "-o", sys.argv[2]])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux
sys.exit(rc)
"""


def _peak_rss_kib(db: Path, out: Path) -> int:
    import subprocess

    p = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, str(db), str(out)], capture_output=True, text=True, check=False
    )
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip())


def _grow(db: Path, copies: int) -> int:
    """Duplicate every event_log row ``copies`` times, shifted in time, in SQL (fast, whatever the columns)."""
    conn = sqlite3.connect(db)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(event_log)") if r[1] != "id"]
    select = ", ".join("e.ts_ns + c.i * 1000000000" if col == "ts_ns" else f"e.{col}" for col in cols)
    conn.execute(
        f"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {copies}) "
        f"INSERT INTO event_log({', '.join(cols)}) SELECT {select} FROM event_log e, c"
    )
    conn.commit()
    (n,) = conn.execute("SELECT count(*) FROM event_log").fetchone()
    conn.close()
    return int(n)


def test_a_large_export_streams_in_bounded_memory(tmp_path: Path) -> None:
    # given: a small recording and the same recording grown to ~300k events
    small = build_db(tmp_path / "small.db")
    large = build_db(tmp_path / "large.db")
    n = _grow(large, 1_200)
    assert n > 300_000
    # when: both are exported in fresh processes
    base_kib = _peak_rss_kib(small, tmp_path / "small.json")
    large_kib = _peak_rss_kib(large, tmp_path / "large.json")
    # then: the large trace is complete, yet peak memory barely moved; holding
    # its events as a list would take several times the output size
    size = (tmp_path / "large.json").stat().st_size
    assert size > 30 << 20
    with (tmp_path / "large.json").open() as f:
        assert sum(1 for line in f if '"ph":"X"' in line or '"ph":"i"' in line) == n
    assert (large_kib - base_kib) * 1024 < 24 << 20, (base_kib, large_kib)


def test_the_explain_flag_marks_what_the_explain_engine_finds(tmp_path: Path) -> None:
    db = build_db(tmp_path / "a.db")
    before = db.read_bytes()
    trace, stderr = export(db, tmp_path / "t.json", "--explain")
    markers = [e for e in trace["traceEvents"] if e.get("cat") == "finding"]
    expected = run_gpuscope("explain", "--db", str(db), "--json")
    ids = [f["id"] for f in json.loads(expected.stdout)["findings"]]
    assert ids, "the fixture should give the explain engine something to find"
    assert [m["args"]["finding"] for m in markers] == ids
    assert all(m["name"].startswith(f"[{m['args']['severity']}]") for m in markers)
    assert f"{len(ids)} findings (explain)" in stderr
    assert db.read_bytes() == before  # nothing stored
