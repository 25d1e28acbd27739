"""explain's time window: offsets and ISO 8601 times, the same forms query takes, --since from the end."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from gpuscope.cli import main
from tests.unit.query.builder import WALL0, build_db


def _iso(wall_ns: int) -> str:
    """An ISO 8601 UTC time with microseconds (what a user would paste)."""
    at = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=wall_ns // 1000)
    return at.isoformat().replace("+00:00", "Z")


def _window(capsys: pytest.CaptureFixture[str], db: Path, *argv: str) -> dict[str, int]:
    assert main(["explain", "--db", str(db), "--json", *argv]) == 0
    window: dict[str, int] = json.loads(capsys.readouterr().out)["window"]
    return window


@pytest.fixture
def db(tmp_path: Path) -> Path:
    # calls every ms for 1 s; the first starts at the session's wall-clock start WALL0
    return build_db(tmp_path / "run.db")


def test_iso_8601_bounds_select_the_same_window_as_the_offsets_they_name(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by_offset = _window(capsys, db, "--from", "100ms", "--to", "250ms")
    by_time = _window(capsys, db, "--from", _iso(WALL0 + 100_000_000), "--to", _iso(WALL0 + 250_000_000))
    assert by_time == by_offset
    assert by_time["start_wall_ns"] == WALL0 + 100_000_000


def test_an_iso_8601_time_with_a_zone_offset_is_the_same_instant(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    utc = _window(capsys, db, "--from", _iso(WALL0 + 500_000_000))
    plus_two = dt.datetime.fromisoformat(_iso(WALL0 + 500_000_000).replace("Z", "+00:00")).astimezone(
        dt.timezone(dt.timedelta(hours=2))
    )
    assert _window(capsys, db, "--from", plus_two.isoformat()) == utc


def test_a_time_before_the_recording_starts_the_window_at_the_recording_start(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = _window(capsys, db, "--from", _iso(WALL0 - 3_600_000_000_000))
    assert w["start_ns"] == w["recording_start_ns"]


def test_since_still_counts_back_from_the_end_of_the_recording(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = _window(capsys, db, "--since", "100ms")
    assert (w["end_ns"], w["length_ns"]) == (w["recording_end_ns"], 100_000_000)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--from", "yesterday"], "--from yesterday: not a time"),
        (["--to=end-5 parsecs"], "--to end-5 parsecs: not a time"),
        (["--since", "5 parsecs"], "--since 5 parsecs: not a duration"),
        (["--since", "1s", "--from", "2s"], "--since cannot be combined with --from/--to"),
    ],
)
def test_unreadable_or_conflicting_window_options_are_usage_errors(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["explain", "--db", str(db), *argv]) == 2
    assert message in capsys.readouterr().err


def test_explain_and_query_count_offsets_from_the_same_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording whose first call came 200 ms after tracing started
    db = build_db(tmp_path / "late.db", first_call_ns=200_000_000)
    # when explain and query are given the same offsets
    window = _window(capsys, db, "--from", "300ms", "--to", "600ms")
    sql = "SELECT min(wall_ns) AS lo, max(wall_ns) AS hi FROM events WHERE op = 'cudaMalloc'"
    assert main(["query", "--db", str(db), "--json", "--from", "300ms", "--to", "600ms", sql]) == 0
    rows = json.loads(capsys.readouterr().out)
    # then both mean 300 ms and 600 ms after the session started, not after the first call
    assert (window["start_wall_ns"], window["end_wall_ns"]) == (WALL0 + 300_000_000, WALL0 + 600_000_000)
    assert (rows[0]["lo"], rows[0]["hi"]) == (WALL0 + 300_000_000, WALL0 + 600_000_000)


@pytest.mark.parametrize("form", ["end-200ms", "-200ms"])
def test_explain_and_query_count_back_from_the_same_end(
    db: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    # when both are asked for the window from 200 ms before the end of the recording
    window = _window(capsys, db, f"--from={form}")
    sql = "SELECT min(wall_ns) AS lo FROM events WHERE op = 'cudaMalloc'"
    assert main(["query", "--db", str(db), "--json", f"--from={form}", sql]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    # then the window is the last 200 ms, and query's first call is its first call
    assert window["end_ns"] - window["start_ns"] == 200_000_000
    assert window["end_ns"] == window["recording_end_ns"]
    assert window["start_wall_ns"] <= row["lo"] < window["start_wall_ns"] + 1_000_000 + 1


@pytest.mark.parametrize("form", ["@{s}.5", "{s}.5", "{s}.500"])
def test_unix_seconds_select_the_same_window_as_iso_8601(
    db: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    seconds = WALL0 // 1_000_000_000  # the recording runs from WALL0 for 1 s
    by_unix = _window(capsys, db, "--from", form.format(s=seconds))
    assert by_unix == _window(capsys, db, "--from", _iso(WALL0 + 500_000_000))
    assert by_unix["start_wall_ns"] == WALL0 + 500_000_000
