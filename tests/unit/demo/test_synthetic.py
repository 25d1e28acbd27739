"""The synthetic demo: every scenario ends with explain naming its cause, through the real store."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.demo import REGISTRY, DemoMode, DemoRunner, Scenario
from gpuscope.errors import UsageError
from gpuscope.model.ops import OPS
from gpuscope.store.connect import connect_writer

SCENARIOS = list(REGISTRY)


@pytest.fixture(scope="module")
def all_seven(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str | None]]:
    """All seven scenarios recorded synthetically into one database, like `gpuscope demo --synthetic`."""
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    runner = DemoRunner(db)
    tops = {s.name: runner.run(s, DemoMode.SYNTHETIC).top_kind for s in SCENARIOS}
    return db, tops


def _ro(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def test_the_registry_holds_the_seven_scenarios_in_order() -> None:
    assert REGISTRY.names() == [
        "incident",
        "cold-start",
        "memcpy-bottleneck",
        "periodic-spike",
        "dataloader-starvation",
        "cpu-contention",
        "gpu-steal",
    ]


def test_aliases_resolve_and_unknown_names_list_the_choices() -> None:
    assert REGISTRY.get("gpu-contention").name == "gpu-steal"
    with pytest.raises(UsageError, match="incident"):
        REGISTRY.get("nope")


def test_registering_a_duplicate_name_is_refused() -> None:
    s = REGISTRY.get("incident")
    with pytest.raises(ValueError):
        REGISTRY.register(s)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_explain_names_each_scenarios_cause_as_the_top_finding(
    scenario: Scenario, all_seven: tuple[Path, dict[str, str | None]]
) -> None:
    _, tops = all_seven
    assert tops[scenario.name] == scenario.expected_kind


def test_each_scenario_alone_in_a_fresh_database_gives_the_same_top_finding(tmp_path: Path) -> None:
    for s in SCENARIOS:
        assert DemoRunner(tmp_path / f"{s.name}.db").run(s, DemoMode.SYNTHETIC).as_expected, s.name


def test_synthetic_recordings_have_the_tables_of_a_real_trace(all_seven: tuple[Path, dict[str, str | None]]) -> None:
    db, _ = all_seven
    fresh = connect_writer(db.parent / "fresh.db")
    want = fresh.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 2").fetchall()
    fresh.close()
    conn = _ro(db)
    got = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 2").fetchall()
    assert set(want) <= set(got)
    for view in ("events", "cuda_calls", "sched_switches", "aggregates"):
        assert conn.execute(f"SELECT count(*) FROM {view}").fetchone()[0] > 0, view


def test_aggregates_count_every_row_like_record_all(all_seven: tuple[Path, dict[str, str | None]]) -> None:
    conn = _ro(all_seven[0])
    rows = dict(conn.execute("SELECT session_id || ':' || pid || ':' || op_id, count(*) FROM event_log GROUP BY 1"))
    aggs = conn.execute(
        "SELECT session_id || ':' || pid || ':' || op_id, sum(count), sum(stored) FROM event_aggregates GROUP BY 1"
    ).fetchall()
    assert {k: (c, s) for k, c, s in aggs} == {k: (n, n) for k, n in rows.items()}


def test_every_op_is_a_known_op_and_every_process_is_named(all_seven: tuple[Path, dict[str, str | None]]) -> None:
    conn = _ro(all_seven[0])
    ops = {int(o) for (o,) in conn.execute("SELECT DISTINCT op_id FROM event_log")}
    assert ops <= {int(op) for op in OPS}
    assert conn.execute("SELECT count(*) FROM events WHERE op IS NULL").fetchone()[0] == 0
    pids = {int(p) for (p,) in conn.execute("SELECT DISTINCT pid FROM event_log")}
    named = {
        int(p) for (p,) in conn.execute("SELECT pid FROM processes WHERE comm IS NOT NULL AND cmdline IS NOT NULL")
    }
    assert pids <= named


def test_preemptions_carry_the_preemptor_and_task_state(all_seven: tuple[Path, dict[str, str | None]]) -> None:
    conn = _ro(all_seven[0])
    rows = conn.execute(
        "SELECT handle >> 32, arg0, arg1, flags, duration_ns FROM event_log WHERE op_id = 192"
    ).fetchall()
    preempted = [r for r in rows if r[1] == 1]
    assert preempted and all(r[0] > 0 and r[2] == 0 and r[3] & 2 and r[4] > 0 for r in preempted)
    assert all(r[2] != 0 for r in rows if r[1] == 0)  # voluntary switches say so (not "stateless")


def test_session_rows_are_complete(all_seven: tuple[Path, dict[str, str | None]]) -> None:
    conn = _ro(all_seven[0])
    conn.row_factory = sqlite3.Row
    sessions = conn.execute("SELECT * FROM sessions ORDER BY id").fetchall()
    assert len(sessions) == len(REGISTRY)
    for s in sessions:
        # no agent ran: a synthetic session names no agent process
        assert s["agent_pid"] is None
        assert None not in tuple(v for k, v in dict(s).items() if k != "agent_pid"), dict(s)
        assert s["stopped_mono_ns"] > s["started_mono_ns"]
        assert (s["end_reason"], s["committed_mono_ns"]) == ("stopped", s["stopped_mono_ns"])
        n = conn.execute("SELECT count(*) FROM event_log WHERE session_id = ?", (s["id"],)).fetchone()[0]
        assert s["events_recorded"] == n
        assert json.loads(s["flags"])["storage"] == "all"
        assert json.loads(s["drops"])["dropped"] == 0
        assert json.loads(s["libraries"])[0]["kind"] == "cudart"


def test_sessions_in_one_database_do_not_overlap_in_time(all_seven: tuple[Path, dict[str, str | None]]) -> None:
    conn = _ro(all_seven[0])
    spans = conn.execute(
        "SELECT min(ts_ns), max(ts_ns + duration_ns) FROM event_log GROUP BY session_id ORDER BY session_id"
    ).fetchall()
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_cli_runs_one_scenario_synthetically_and_prints_header_report_and_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a machine without a GPU
    monkeypatch.setattr("gpuscope.commands.demo.detect_gpu", lambda: None)
    db = tmp_path / "keep.db"
    # when
    rc = main(["demo", "cold-start", "--synthetic", "--db", str(db)])
    # then
    out = capsys.readouterr().out
    assert rc == 0
    assert "no GPU: stand-in CUDA library" in out
    assert "1. [" in out and "cold-start" in out
    assert "✓ top finding: cold-start" in out
    assert str(db) in out and db.exists()


def test_cli_refuses_an_unknown_scenario_and_a_bad_scale(tmp_path: Path) -> None:
    assert main(["demo", "nope", "--synthetic", "--db", str(tmp_path / "x.db")]) == 2
    assert main(["demo", "incident", "--synthetic", "--scale", "0"]) == 2


def test_cli_lists_the_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(s.name in out and s.expected_kind in out for s in SCENARIOS)
