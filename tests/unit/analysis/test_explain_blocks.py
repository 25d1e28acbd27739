"""explain's findings are the same whether it reads a recording's column blocks or its rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.cli import main
from gpuscope.importers import import_file
from gpuscope.model.session_choice import EVERY_SESSION, SessionChoice
from tests.ingero_fixtures import INGERO_NODE_FILES, ingero_fixture
from tests.unit.store.recordings import without_blocks


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The six synthetic demo scenarios, written by trace's writer (with blocks), and a copy without blocks."""
    folder = tmp_path_factory.mktemp("blocks")
    with_blocks = folder / "demo.db"
    assert main(["demo", "--synthetic", "--db", str(with_blocks)]) == 0
    conn = sqlite3.connect(with_blocks)
    assert conn.execute("SELECT count(*) FROM event_blocks").fetchone()[0] > 0
    conn.close()
    return with_blocks, without_blocks(with_blocks)


def _options(path: Path) -> list[ExplainOptions]:
    conn = sqlite3.connect(path)
    sessions = conn.execute("SELECT id, started_wall_ns, stopped_wall_ns FROM sessions ORDER BY id").fetchall()
    pids = [int(r[0]) for r in conn.execute("SELECT DISTINCT pid FROM processes ORDER BY pid LIMIT 2")]
    conn.close()
    every = EVERY_SESSION
    return (
        [ExplainOptions(), ExplainOptions(sessions=every)]
        + [ExplainOptions(from_wall_ns=a, to_wall_ns=b, sessions=every) for _, a, b in sessions]
        + [ExplainOptions(sessions=SessionChoice.parse(str(i))) for i, _, _ in sessions]
        + [ExplainOptions(pids=(p,), sessions=every) for p in pids]
    )


def test_every_window_gets_the_same_report_from_blocks_and_from_rows(recordings: tuple[Path, Path]) -> None:
    with_blocks, rows_only = recordings
    found = set()
    for opts in _options(with_blocks):
        # when one window is explained from the blocks and from the rows
        a = explain_db(with_blocks, opts).as_dict(per_process=True)
        b = explain_db(rows_only, opts).as_dict(per_process=True)
        # then the two reports are the same, number for number
        assert a == b, opts
        findings = a["findings"]
        assert isinstance(findings, list), a
        found |= {str(f["kind"]) for f in findings}
    # and they have findings to compare: the scenarios' causes
    assert {"cpu-preemption", "gpu-contention", "memcpy-bound"} <= found, found


@pytest.mark.parametrize("name", INGERO_NODE_FILES)
def test_an_imported_recording_gets_blocks_and_the_same_report(tmp_path: Path, name: str) -> None:
    # given a reference recording imported (the import builds blocks and the time index) and a copy without blocks
    imported = tmp_path / "imported.db"
    import_file(ingero_fixture(name), imported)
    conn = sqlite3.connect(imported)
    (covered,) = conn.execute("SELECT coalesce(sum(rows), 0) FROM event_blocks").fetchone()
    (rows,) = conn.execute("SELECT count(*) FROM event_log").fetchone()
    index = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_log_ts'").fetchone()
    conn.close()
    assert covered == rows > 0 and index is not None  # and the time index, as a closed recording has
    rows_only = without_blocks(imported)
    # then explain says the same from either
    a = explain_db(imported, ExplainOptions()).as_dict(per_process=True)
    assert a == explain_db(rows_only, ExplainOptions()).as_dict(per_process=True)
