"""`stacks` takes the window every reading command takes, and no command answers a window that ends before it starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.cli import main
from tests.serve.support import profile_recording
from tests.unit.query.builder import build_db


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """On-CPU samples: 30 of thread 100 in its first second, 10 of thread 101 collating in its last 200 ms."""
    return profile_recording(tmp_path_factory.mktemp("stacks") / "p.db")


def _samples(capsys: pytest.CaptureFixture[str], db: Path, *window: str) -> int:
    assert main(["stacks", "--db", str(db), "--cpu", "--json", *window]) == 0
    return sum(int(row["samples"]) for row in json.loads(capsys.readouterr().out))


def test_stacks_reads_only_the_window_it_is_given(profiled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _samples(capsys, profiled) == 40
    # the last second holds only the collating thread's samples, the first only the other's
    assert _samples(capsys, profiled, "--since", "1s") == 10
    assert _samples(capsys, profiled, "--from", "end-1s") == 10
    assert _samples(capsys, profiled, "--to", "1s") == 30
    # and --pid is repeatable, as elsewhere
    assert _samples(capsys, profiled, "--pid", "100", "--pid", "7") == 40
    assert _samples(capsys, profiled, "--pid", "7") == 0


@pytest.mark.parametrize(
    "command", [["stacks"], ["stacks", "--cpu"], ["explain"], ["query", "SELECT 1"], ["export", "-o", "out.json"]]
)
@pytest.mark.parametrize(("start", "end"), [("20s", "10s"), ("end-5s", "end-10s"), ("@1700000010", "@1700000000")])
def test_a_window_that_ends_before_it_starts_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    start: str,
    end: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    db = build_db(tmp_path / "t.db")
    assert main([*command[:1], "--db", str(db), *command[1:], "--from", start, "--to", end]) == 2
    err = capsys.readouterr().err
    assert f"error: --from {start} is after --to {end}" in err and "give the earlier time to --from" in err
    assert not (tmp_path / "out.json").exists()


def test_an_offset_after_a_unix_time_is_refused_once_the_recording_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = build_db(tmp_path / "t.db")
    # (the recording starts in 2023: a time in 2001 is before any offset into it)
    for command in (["query", "--db", str(db), "SELECT 1"], ["explain", "--db", str(db)]):
        assert main([*command, "--from", "1s", "--to", "@1000000000"]) == 2
        assert "--from is after --to in this recording" in capsys.readouterr().err
