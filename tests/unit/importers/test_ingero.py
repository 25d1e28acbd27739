"""gpuscope import: Ingero's databases become ours with nothing lost."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.importers import import_file
from gpuscope.recording.merge_formats import merge_recordings as merge_files
from gpuscope.store.connect import connect_reader
from tests.ingero_fixtures import INGERO_NODE_FILES, ingero_fixture
from tests.unit.importers.reference_schema import LEGACY_TABLES

NODE_FILES = list(INGERO_NODE_FILES)


@pytest.fixture
def ingero(tmp_path: Path) -> dict[str, Path]:
    """Copies of the two real Ingero files (the originals are never opened for writing)."""
    out = {}
    for name in NODE_FILES:
        out[name] = tmp_path / name
        shutil.copyfile(ingero_fixture(name), out[name])
        out[name].chmod(0o444)
    return out


def _source_counts(path: Path) -> dict[str, object]:
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return {
        "ops": Counter({(s, o): n for s, o, n in c.execute("SELECT source, op, count(*) FROM events GROUP BY 1, 2")}),
        "events": c.execute("SELECT count(*) FROM events").fetchone()[0],
        "stacks": c.execute("SELECT count(*) FROM stack_traces").fetchone()[0],
        "chains": c.execute("SELECT count(*) FROM causal_chains").fetchone()[0],
        "snapshots": c.execute("SELECT count(*) FROM system_snapshots").fetchone()[0],
    }


@pytest.mark.parametrize("name", NODE_FILES)
def test_every_event_stack_and_chain_of_a_fixture_is_accounted_for(
    tmp_path: Path, ingero: dict[str, Path], name: str
) -> None:
    # given
    src = _source_counts(ingero[name])
    # when
    report = import_file(ingero[name], tmp_path / "ours.db")
    # then
    conn = connect_reader(tmp_path / "ours.db")
    per_op = Counter(
        {
            (s, o): n
            for s, o, n in conn.execute("SELECT source_code, op_code, count(*) FROM imported_events GROUP BY 1, 2")
        }
    )
    assert per_op == src["ops"]
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == src["events"] == report.events
    assert conn.execute("SELECT count(*) FROM imported_stacks").fetchone()[0] == src["stacks"] == report.stacks
    assert conn.execute("SELECT count(*) FROM imported_chains").fetchone()[0] == src["chains"] == report.chains
    assert conn.execute("SELECT count(*) FROM imported_snapshots").fetchone()[0] == src["snapshots"]


def test_ingero_ops_map_onto_ours_by_name(tmp_path: Path, ingero: dict[str, Path]) -> None:
    import_file(ingero["sample-gpu-node-01.db"], tmp_path / "a.db")
    import_file(ingero["sample-gpu-node-02.db"], tmp_path / "b.db")
    a = dict(connect_reader(tmp_path / "a.db").execute("SELECT op, count(*) FROM events GROUP BY op").fetchall())
    b = dict(connect_reader(tmp_path / "b.db").execute("SELECT op, count(*) FROM events GROUP BY op").fetchall())
    assert a == {"sched_switch": 99, "block_io": 101}
    assert b == {"sched_switch": 62, "block_io": 98, "cuMemAlloc": 40}
    writes = connect_reader(tmp_path / "a.db").execute("SELECT count(*) FROM events WHERE op = 'block_io' AND arg0 = 1")
    assert writes.fetchone()[0] == 3


def test_wall_clock_times_reproduce_ingero_timestamps(tmp_path: Path, ingero: dict[str, Path]) -> None:
    src = ingero["sample-gpu-node-02.db"]
    import_file(src, tmp_path / "ours.db")
    theirs = dict(sqlite3.connect(f"file:{src}?mode=ro", uri=True).execute("SELECT id, timestamp FROM events"))
    conn = connect_reader(tmp_path / "ours.db")
    rows = conn.execute(
        "SELECT i.source_event_id, e.op, e.wall_ns, e.duration_ns FROM events e "
        "JOIN imported_events i ON i.event_log_id = e.id"
    ).fetchall()
    for source_id, op, wall_ns, duration_ns in rows:
        # Ingero stamps scheduler and block I/O events at their end; gpuscope at their start.
        end_stamped = op in ("sched_switch", "block_io")
        assert wall_ns + (duration_ns if end_stamped else 0) == theirs[source_id]


def test_causal_chains_are_kept_with_node_namespaced_ids(tmp_path: Path, ingero: dict[str, Path]) -> None:
    import_file(ingero["sample-gpu-node-01.db"], tmp_path / "ours.db")
    conn = connect_reader(tmp_path / "ours.db")
    rows = conn.execute("SELECT id, severity, op FROM imported_chains ORDER BY detected_wall_ns").fetchall()
    assert rows[-1] == ("gpu-node-01:tail-high-cuMemAlloc", "HIGH", "cuMemAlloc")
    assert all(r[0].startswith("gpu-node-01:") for r in rows)


def test_queries_over_our_views_work_on_an_imported_file(tmp_path: Path, ingero: dict[str, Path]) -> None:
    import_file(ingero["sample-gpu-node-02.db"], tmp_path / "ours.db")
    conn = connect_reader(tmp_path / "ours.db")
    allocs = conn.execute("SELECT count(*), min(bytes), min(node), min(comm) FROM cuda_calls WHERE op = 'cuMemAlloc'")
    assert allocs.fetchone() == (40, 1048576, "gpu-node-02", "python3")
    off_cpu = conn.execute("SELECT count(*), sum(off_cpu_ns) > 0 FROM sched_switches").fetchone()
    assert off_cpu == (62, 1)
    assert conn.execute("SELECT count(DISTINCT event_id) FROM events").fetchone()[0] == 200


def test_merge_accepts_ingero_files_and_imports_them_on_the_fly(tmp_path: Path, ingero: dict[str, Path]) -> None:
    files = list(ingero.values())
    report = merge_files(files, tmp_path / "cluster.db")
    assert report.events_by_node() == {"gpu-node-01": 200, "gpu-node-02": 200}
    assert [i.kind for i in report.inputs] == ["ingero", "ingero"]
    # the same Ingero files again, beside the merge: nothing new
    again = merge_files([tmp_path / "cluster.db", *files], tmp_path / "again.db")
    assert again.events_by_node() == report.events_by_node()
    conn = connect_reader(tmp_path / "again.db")
    assert conn.execute("SELECT count(*) FROM imported_stacks").fetchone()[0] == 9
    assert conn.execute("SELECT count(*) FROM imported_chains").fetchone()[0] == 5


def _legacy_ingero(path: Path) -> Path:
    """An Ingero file from before v0.9: integer ids, no node, no comm or cgroup columns."""
    c = sqlite3.connect(path)
    c.executescript(
        LEGACY_TABLES
        + """
        CREATE TABLE causal_chains (id TEXT PRIMARY KEY, detected_at INTEGER NOT NULL, severity TEXT NOT NULL,
            summary TEXT NOT NULL, root_cause TEXT NOT NULL, explanation TEXT NOT NULL);
        CREATE TABLE stack_traces (hash INTEGER PRIMARY KEY, ips TEXT NOT NULL);
        INSERT INTO sessions(started_at, stopped_at, ingero_ver) VALUES (1000000, 9000000, '0.6.2');
        INSERT INTO events(timestamp, pid, tid, source, op, duration, arg0, arg1, stack_hash) VALUES
            (2000000, 7, 7, 1, 1, 900, 4096, 140000, 11),
            (2100000, 7, 7, 1, 2, 300, 140000, 4096, 0),
            (2200000, 7, 8, 1, 9, 100, 512, 5, 0),
            (2300000, 7, 8, 8, 4, 100, 0, 0, 0);
        INSERT INTO causal_chains VALUES ('chain-047', 2500000, 'LOW', 's', 'r', 'e');
        INSERT INTO stack_traces VALUES (11, '["0x1","0x2"]');
        """
    )
    c.commit()
    c.close()
    return path


def test_a_file_without_node_names_is_named_after_the_file_and_says_so(tmp_path: Path) -> None:
    legacy = _legacy_ingero(tmp_path / "old gpu:7.db")
    report = import_file(legacy, tmp_path / "ours.db")
    assert report.nodes == ["old-gpu-7"]
    assert report.notes == [
        "recorded without a node name: named 'old-gpu-7' after the file (--node NAME to choose one)"
    ]
    conn = connect_reader(tmp_path / "ours.db")
    assert conn.execute("SELECT DISTINCT node FROM events").fetchall() == [("old-gpu-7",)]


def test_an_old_integer_id_file_imports_under_the_node_name_given(tmp_path: Path) -> None:
    legacy = _legacy_ingero(tmp_path / "old.db")
    report = import_file(legacy, tmp_path / "ours.db", node="box-1")
    assert report.notes == []
    assert report.events == 4 and report.stacks == 1 and report.chains == 1
    conn = connect_reader(tmp_path / "ours.db")
    rows = conn.execute("SELECT event_id, op, bytes, handle, wall_ns FROM events ORDER BY ts_ns").fetchall()
    assert rows == [
        ("box-1:1", "cudaMalloc", 4096, 140000, 2000000),
        ("box-1:2", "cudaFree", 4096, 140000, 2100000),
        ("box-1:3", "cudaMemcpy2D", 512, 0, 2200000),
        ("box-1:4", "cudaGraphLaunch", 0, 0, 2300000),
    ]
    assert conn.execute("SELECT id FROM imported_chains").fetchall() == [("box-1:chain-047",)]
    imported_ops = conn.execute("SELECT name, source FROM ops WHERE id >= 1024 ORDER BY name").fetchall()
    assert ("cudaMemcpy2D", "cuda") in imported_ops


def test_import_command_prints_counts_and_refuses_non_ingero_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legacy = _legacy_ingero(tmp_path / "old.db")
    assert main(["import", str(legacy), "-o", str(tmp_path / "ours.db")]) == 0
    out = capsys.readouterr().out
    assert "4 events" in out and "note: recorded without a node name: named 'old'" in out
    rc = main(["import", str(tmp_path / "ours.db"), "-o", str(tmp_path / "again.db")])
    err = capsys.readouterr().err
    assert rc == 1 and "not an Ingero database" in err and "Traceback" not in err
    assert not (tmp_path / "again.db").exists()
