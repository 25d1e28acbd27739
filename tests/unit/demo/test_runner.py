"""The demo runner cleans up after itself: no work folder is left behind in the temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

from gpuscope.demo import DemoRunner
from tests.conftest import run_gpuscope


def test_a_synthetic_demo_leaves_nothing_in_the_temporary_directory(tmp_path: Path) -> None:
    # given an empty temporary directory of the demo's own
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # when a synthetic scenario runs into a named database
    res = run_gpuscope(
        "demo", "--synthetic", "--db", str(tmp_path / "d.db"), "incident", env={**os.environ, "TMPDIR": str(tmp)}
    )
    # then it ran, and left no folder behind
    assert res.returncode == 0, res.stderr
    assert list(tmp.iterdir()) == []


def test_the_runners_own_work_folder_is_removed_when_it_closes(tmp_path: Path) -> None:
    with DemoRunner(tmp_path / "d.db") as runner:
        work = runner.workdir
        (work / "program").write_text("built")
        assert runner.workdir == work  # made once, then reused
    assert not work.exists()


def test_a_work_folder_given_to_the_runner_is_left_alone(tmp_path: Path) -> None:
    given = tmp_path / "bin"
    given.mkdir()
    with DemoRunner(tmp_path / "d.db", workdir=given) as runner:
        (runner.workdir / "program").write_text("built")
    assert (given / "program").read_text() == "built"
