"""gpuscope merge: one database from many nodes, stable, and loud about conflicts."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.model.ops import Op
from gpuscope.recording.merge_formats import merge_recordings as merge_files
from gpuscope.store import merge_recordings as store_merge
from gpuscope.store.connect import connect_reader, connect_writer
from gpuscope.store.merge_recordings import ClockOffset, MergeConflictError
from gpuscope.store.migrate import migrate
from gpuscope.store.sessions_write import SessionInfo, create_session
from tests.other_user import needs_root_to_plant, plant_link, shared_folder

T0 = 1_700_000_000_000_000_000


def _node_db(
    path: Path,
    node: str,
    *,
    uuid: str | None = None,
    start_ns: int = T0,
    comms: tuple[str, ...] = ("python", "worker"),
    ops: tuple[Op, ...] = (Op.cudaMalloc, Op.cudaLaunchKernel, Op.sched_switch),
    per_op: int = 5,
) -> Path:
    """A recording of one node: one session, ``per_op`` events of each op spread over the comms."""
    conn = connect_writer(path)
    info = SessionInfo(uuid or f"uuid-{node}-{start_ns}", node, node, "6.8", "0.1", "1.4", start_ns, 1_000, [], {})
    sid = create_session(conn, info)
    comm_ids = []
    for comm in comms:
        conn.execute("INSERT OR IGNORE INTO comms(comm) VALUES (?)", (comm,))
        comm_ids.append(conn.execute("SELECT id FROM comms WHERE comm = ?", (comm,)).fetchone()[0])
    rows = []
    for i, op in enumerate(ops):
        for j in range(per_op):
            ts = 1_000 + (i * per_op + j) * 1_000_000
            rows.append((sid, ts, 500, 42, 43, comm_ids[j % len(comm_ids)], 1, int(op), 0, 0, 64, 0, 0, 0, 0))
    conn.executemany(
        "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, comm_id, cgroup_id, op_id, flags, ret, "
        "bytes, handle, stream, arg0, arg1) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute(
        "UPDATE sessions SET stopped_wall_ns = ?, stopped_mono_ns = ? WHERE id = ?",
        (start_ns + len(rows) * 1_000_000, 1_000 + len(rows) * 1_000_000, sid),
    )
    conn.close()
    return path


def _counts(path: Path) -> Counter[tuple[str, str, str]]:
    conn = connect_reader(path)
    rows = conn.execute("SELECT node, op, comm, count(*) FROM events GROUP BY node, op, comm").fetchall()
    return Counter({(n, o, c): k for n, o, c, k in rows})


def _dump(path: Path) -> list[tuple[object, ...]]:
    conn = connect_reader(path)
    return conn.execute(
        "SELECT event_id, node, ts_ns, wall_ns, op, comm, duration_ns FROM events ORDER BY event_id"
    ).fetchall()


def test_merging_three_node_databases_equals_the_sum_of_their_parts(tmp_path: Path) -> None:
    # given
    inputs = [_node_db(tmp_path / f"{n}.db", n, per_op=3 + i) for i, n in enumerate(("a", "b", "c"))]
    # when
    report = merge_files(inputs, tmp_path / "cluster.db")
    # then
    merged = _counts(tmp_path / "cluster.db")
    expected = sum((_counts(p) for p in inputs), Counter())
    assert merged == expected
    assert report.events_by_node() == {"a": 9, "b": 12, "c": 15}
    conn = connect_reader(tmp_path / "cluster.db")
    ids = [r[0] for r in conn.execute("SELECT event_id FROM events")]
    assert len(ids) == len(set(ids)) == 36
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 3


def test_comms_are_re_interned_so_every_event_keeps_its_thread_name(tmp_path: Path) -> None:
    a = _node_db(tmp_path / "a.db", "a", comms=("python", "worker"))
    b = _node_db(tmp_path / "b.db", "b", comms=("nccl-proxy", "python"))  # same ids, other names
    merge_files([a, b], tmp_path / "m.db")
    assert _counts(tmp_path / "m.db") == _counts(a) + _counts(b)
    conn = connect_reader(tmp_path / "m.db")
    comms = [r[0] for r in conn.execute("SELECT comm FROM comms ORDER BY comm")]
    assert comms == ["nccl-proxy", "python", "worker"]


def test_merging_a_merged_database_again_is_stable(tmp_path: Path) -> None:
    inputs = [_node_db(tmp_path / f"{n}.db", n) for n in ("a", "b", "c")]
    merge_files(inputs, tmp_path / "m1.db")
    report = merge_files([tmp_path / "m1.db", *inputs], tmp_path / "m2.db")
    assert _dump(tmp_path / "m2.db") == _dump(tmp_path / "m1.db")
    assert [i.sessions_skipped for i in report.inputs] == [0, 1, 1, 1]
    merge_files([tmp_path / "m2.db"], tmp_path / "m3.db")
    assert _dump(tmp_path / "m3.db") == _dump(tmp_path / "m1.db")


def test_force_node_names_a_database_recorded_without_a_node(tmp_path: Path) -> None:
    anon = _node_db(tmp_path / "anon.db", "")
    assert main(["merge", str(anon), "-o", str(tmp_path / "m.db")]) == 2  # usage: a name is needed
    assert not (tmp_path / "m.db").exists()
    assert main(["merge", str(anon), "-o", str(tmp_path / "m.db"), "--force-node", "gpu-7"]) == 0
    assert {k[0] for k in _counts(tmp_path / "m.db")} == {"gpu-7"}


def test_force_node_path_equals_name_renames_one_input(tmp_path: Path) -> None:
    a1 = _node_db(tmp_path / "a1.db", "a")
    a2 = _node_db(tmp_path / "a2.db", "a", uuid="other")  # same name, same time: a different machine
    with pytest.raises(MergeConflictError):
        merge_files([a1, a2], tmp_path / "m.db")
    merge_files([a1, a2], tmp_path / "m.db", rename={str(a2): "a-prime"})
    assert {k[0] for k in _counts(tmp_path / "m.db")} == {"a", "a-prime"}


def test_overlapping_sessions_of_one_node_are_reported_not_merged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a1 = _node_db(tmp_path / "a1.db", "a", uuid="first")
    a2 = _node_db(tmp_path / "a2.db", "a", uuid="second", start_ns=T0 + 5_000_000)
    rc = main(["merge", str(a1), str(a2), "-o", str(tmp_path / "m.db")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "overlapping sessions" in err and "Traceback" not in err
    assert not (tmp_path / "m.db").exists()


def test_sessions_of_one_node_at_different_times_merge(tmp_path: Path) -> None:
    a1 = _node_db(tmp_path / "a1.db", "a", uuid="monday")
    a2 = _node_db(tmp_path / "a2.db", "a", uuid="tuesday", start_ns=T0 + 86_400_000_000_000)
    report = merge_files([a1, a2], tmp_path / "m.db")
    assert report.events_by_node() == {"a": 30}


@pytest.mark.parametrize("kind", ["missing", "corrupt", "not gpuscope", "newer schema"])
def test_bad_input_is_one_line_error_and_leaves_the_output_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    good = _node_db(tmp_path / "good.db", "a")
    bad = tmp_path / "bad.db"
    if kind == "corrupt":
        bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    elif kind == "not gpuscope":
        sqlite3.connect(bad).execute("CREATE TABLE t(x)").connection.close()
    elif kind == "newer schema":
        _node_db(bad, "b")
        c = sqlite3.connect(bad)
        c.execute("PRAGMA user_version = 999")
        c.close()
    out = tmp_path / "out.db"
    out.write_bytes(b"previous")
    rc = main(["merge", str(good), str(bad), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("error: ") and "Traceback" not in err
    assert out.read_bytes() == b"previous"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.db")]  # no temporary left behind


def test_clock_offsets_line_up_nodes_in_events_aligned(tmp_path: Path) -> None:
    a = _node_db(tmp_path / "a.db", "a")
    b = _node_db(tmp_path / "b.db", "b")
    merge_files([a, b], tmp_path / "m.db", clock_offsets=[ClockOffset("b", -2_500)])
    conn = connect_reader(tmp_path / "m.db")
    rows = dict(conn.execute("SELECT node, min(aligned_wall_ns - wall_ns) FROM events_aligned GROUP BY node"))
    assert rows == {"a": 0, "b": -2_500}


def test_findings_follow_their_session(tmp_path: Path) -> None:
    a = _node_db(tmp_path / "a.db", "a")
    b = _node_db(tmp_path / "b.db", "b")
    conn = sqlite3.connect(b)
    conn.execute(
        "INSERT INTO findings(session_id, window_start_ns, window_end_ns, severity, kind, finding_id, symptom, causes, "
        "fix, created_at_ns) VALUES (1, 0, 1, 'high', 'cpu', 'f1', 's', '[]', 'x', 0)"
    )
    conn.commit()
    conn.close()
    merge_files([a, b], tmp_path / "m.db")
    merge_files([tmp_path / "m.db", b], tmp_path / "m2.db")
    r = connect_reader(tmp_path / "m2.db")
    rows = r.execute("SELECT s.node, f.finding_id FROM findings f JOIN sessions s ON s.id = f.session_id").fetchall()
    assert rows == [("b", "f1")]


def test_measured_offsets_from_gpuscope_nodes_put_every_node_on_the_clients_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    a = _node_db(tmp_path / "a.db", "a")
    b = _node_db(tmp_path / "b.db", "b")
    measured = tmp_path / "nodes.json"
    measured.write_text(
        json.dumps(
            [
                {"node": "a", "address": "a:8443", "ok": True, "clock_offset_ns": 1_000, "uncertainty_ns": 400},
                {"node": "b", "address": "b:8443", "ok": True, "clock_offset_ns": 5_000_000_000, "uncertainty_ns": 900},
                {"node": None, "address": "c:8443", "ok": False, "error": "connection refused"},
            ]
        )
    )
    out = tmp_path / "m.db"
    assert main(["merge", str(a), str(b), "-o", str(out), "--clock-offsets-from", str(measured)]) == 0
    conn = connect_reader(out)
    rows = dict(conn.execute("SELECT node, min(aligned_wall_ns - wall_ns) FROM events_aligned GROUP BY node"))
    sources = [r[0] for r in conn.execute("SELECT source FROM node_clock_offsets ORDER BY node")]
    conn.close()
    # b's clock runs 5 s ahead of the client's: its events move back by 5 s
    assert rows == {"a": -1_000, "b": -5_000_000_000}
    assert all(s.startswith("measured by gpuscope nodes") for s in sources)


@pytest.mark.parametrize(("text", "ns"), [("b=-3.2ms", -3_200_000), ("b=150us", 150_000), ("b=+1m", 60_000_000_000)])
def test_a_clock_offset_takes_the_shared_duration_forms_with_a_sign(tmp_path: Path, text: str, ns: int) -> None:
    a = _node_db(tmp_path / "a.db", "a")
    b = _node_db(tmp_path / "b.db", "b")
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "m.db"), "--clock-offset", text]) == 0
    conn = connect_reader(tmp_path / "m.db")
    assert conn.execute("SELECT offset_ns FROM node_clock_offsets WHERE node = 'b'").fetchone()[0] == ns
    conn.close()


@pytest.mark.parametrize("text", ["b=12", "b=", "=3ms", "b=3 parsecs"])
def test_a_clock_offset_without_a_unit_is_refused(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _node_db(tmp_path / "a.db", "a")
    assert main(["merge", str(a), "-o", str(tmp_path / "m.db"), "--clock-offset", text]) == 2
    assert "with a unit" in capsys.readouterr().err


def test_ctrl_c_while_an_input_is_attached_is_the_interrupt_and_leaves_the_output_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an earlier output, and a merge interrupted in its transaction while a read of the input is under way
    a = _node_db(tmp_path / "a.db", "a")
    out = tmp_path / "out" / "m.db"
    out.parent.mkdir()
    out.write_bytes(b"an earlier output")

    def interrupted(conn: sqlite3.Connection, *args: object) -> None:
        conn.execute("BEGIN")
        reading = conn.execute("SELECT id FROM src.event_log")
        reading.fetchone()  # src is held by this statement and by the transaction
        raise KeyboardInterrupt

    monkeypatch.setattr(store_merge, "_merge_one", interrupted)
    # when it runs: the interrupt, not "database src is locked", comes out
    with pytest.raises(KeyboardInterrupt):
        merge_files([a], out)
    # then the earlier output is as it was, and nothing else is in its folder
    assert out.read_bytes() == b"an earlier output"
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.db"]


def _utf16_node_db(path: Path, node: str) -> Path:
    """A recording whose text another tool stored as UTF-16 (set before its first table)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA encoding='UTF-16le'")
    migrate(conn)
    conn.close()
    return _node_db(path, node)


def test_a_utf16_input_is_refused_with_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # given a UTF-8 recording, and one whose text is stored as UTF-16 (readable on its own)
    good = _node_db(tmp_path / "good.db", "a")
    other = _utf16_node_db(tmp_path / "utf16.db", "b")
    connect_reader(other).close()
    out = tmp_path / "m.db"
    # when both are merged
    rc = main(["merge", str(good), str(other), "-o", str(out)])
    # then one error line names the file and its encoding, and no output is written
    err = capsys.readouterr().err
    assert rc == 1
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        f"error: {other}: its text is stored as UTF-16le; merge reads only UTF-8 recordings (gpuscope's own)"
    ]
    assert "Traceback" not in err and "fix: " in err
    assert not out.exists()


@needs_root_to_plant
def test_merge_refuses_an_output_link_another_user_planted_in_a_shared_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a file of root's, and a link to it that nobody planted in a folder like /tmp
    a = _node_db(tmp_path / "a.db", "a")
    precious = tmp_path / "precious.db"
    precious.write_bytes(b"root's")
    link = plant_link(shared_folder(tmp_path) / "m.db", precious)
    # when root merges onto the link
    rc = main(["merge", str(a), "-o", str(link)])
    # then it refuses in one line, and the file behind the link is as it was
    err = capsys.readouterr().err
    assert rc == 1 and "m.db: not following a symlink owned by another user" in err, err
    assert precious.read_bytes() == b"root's" and link.is_symlink()
    assert sorted(p.name for p in link.parent.iterdir()) == ["m.db"]
