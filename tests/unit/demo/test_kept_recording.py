"""Where the demo keeps its recording without --db, and how it stops when killed: nothing piles up in /tmp."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import pytest

from gpuscope.cli import main
from gpuscope.demo import default_db
from gpuscope.demo.runner import termination_interrupts
from tests.conftest import run_gpuscope


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_demo_without_db_keeps_its_recording_in_the_cache_and_leaves_the_temporary_directory_empty(
    tmp_path: Path,
) -> None:
    # given empty temporary and cache folders of the demo's own
    tmp, cache = tmp_path / "tmp", tmp_path / "cache"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(cache)}
    # when a synthetic scenario runs without --db
    res = run_gpuscope("demo", "--synthetic", "cold-start", env=env)
    # then nothing is left in the temporary directory, and the recording it names is in the cache
    assert res.returncode == 0, res.stderr
    assert sorted(x.name for x in tmp.iterdir()) == []
    kept = cache / "gpuscope" / "demo" / "demo.db"
    assert kept.is_file()
    assert f"data kept in {kept}" in res.stdout


def test_each_demo_run_without_db_replaces_the_previous_runs_recording(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a machine without a GPU
    monkeypatch.setattr("gpuscope.commands.demo.detect_gpu", lambda: None)
    # when the demo runs twice without --db
    assert main(["demo", "--synthetic", "cold-start"]) == 0
    assert main(["demo", "--synthetic", "cold-start"]) == 0
    capsys.readouterr()
    # then the kept recording holds the second run only
    conn = sqlite3.connect(f"file:{cache / 'gpuscope' / 'demo' / 'demo.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
    finally:
        conn.close()


def test_the_default_database_removes_what_a_killed_run_left_beside_it(cache: Path) -> None:
    # given the files a killed demo leaves beside its recording
    folder = cache / "gpuscope" / "demo"
    folder.mkdir(parents=True)
    for name in ("demo.db", "demo.db-wal", "demo.db-shm", "demo.db-reserve", "demo.db-journal"):
        (folder / name).write_text("old")
    # when the next run asks for its database
    db = default_db()
    # then it is the same path, and none of them is there any more
    assert db == folder / "demo.db"
    assert sorted(x.name for x in folder.iterdir()) == []


def test_sigterm_interrupts_like_ctrl_c_inside_and_not_after() -> None:
    before = signal.getsignal(signal.SIGTERM)
    # when SIGTERM arrives inside the block, it raises KeyboardInterrupt there
    with pytest.raises(KeyboardInterrupt), termination_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before os.kill returns
        raise AssertionError("SIGTERM did not interrupt")
    # then the previous handlers are back
    assert signal.getsignal(signal.SIGTERM) == before
