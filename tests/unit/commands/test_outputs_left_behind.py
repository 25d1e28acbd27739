"""Outputs in shared folders: never written through another user's link, and no temporary a killed run left kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.cli import main
from tests.other_user import needs_root_to_plant, plant_link, shared_folder
from tests.pids import dead_pid
from tests.unit.query.builder import build_db


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    return build_db(tmp_path / "rec.db", n=50)


@needs_root_to_plant
def test_export_refuses_a_link_another_user_planted_and_leaves_what_it_points_at(
    tmp_path: Path, recording: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a file of root's, and nobody's link to it in a folder like /tmp
    precious = tmp_path / "precious"
    precious.write_text("root's")
    link = plant_link(shared_folder(tmp_path) / "trace.json", precious)
    # when root exports there
    rc = main(["export", "--db", str(recording), "-o", str(link)])
    # then one error line says why, and the file, the link and the folder are as they were
    err = capsys.readouterr().err
    assert rc == 1
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        f"error: {link}: not following a symlink owned by another user (uid 65534) in the sticky folder "
        f"{link.parent}: it could point anywhere"
    ]
    assert precious.read_text() == "root's" and link.is_symlink()
    assert [p.name for p in link.parent.iterdir()] == ["trace.json"]


@pytest.mark.parametrize("command", ["export", "merge"])
def test_the_next_run_removes_the_temporaries_a_killed_run_left_and_keeps_a_running_ones(
    tmp_path: Path, recording: Path, live_pid: int, command: str
) -> None:
    # given what a run killed while writing out.db left (its temporary and a journal), and a running one's temporary
    out = tmp_path / "out" / "out.db"
    out.parent.mkdir()
    dead = dead_pid()
    left = [f".out.db.{dead}.0123abcd.tmp", f".out.db.{dead}.0123abcd.tmp-journal"]
    running = f".out.db.{live_pid}.89abcdef.tmp"
    for name in (*left, running):
        (out.parent / name).write_bytes(b"half")
    # when the command writes out.db again
    inputs = ["--db", str(recording)] if command == "export" else [str(recording)]
    assert main([command, *inputs, "-o", str(out)]) == 0
    # then the killed run's files are gone, the running one's is kept
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([running, "out.db"])
