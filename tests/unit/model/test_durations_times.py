"""The one duration parser and the one time-point parser every option uses."""

from __future__ import annotations

import datetime as dt

import pytest

from gpuscope.model.times import TimePoint
from gpuscope.model.units import parse_duration_ns

S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("250ns", 250),
        ("500us", 500_000),
        ("500µs", 500_000),
        ("500μs", 500_000),
        ("2ms", 2_000_000),
        ("30s", 30 * S),
        ("1.5", 1_500_000_000),
        ("90", 90 * S),
        ("0", 0),
        (".5s", S // 2),
        ("0.1s", 100_000_000),
        ("5m", 300 * S),
        ("5min", 300 * S),
        ("1m30s", 90 * S),
        ("1h2m3.5s", 3723 * S + S // 2),
        ("2h", 7200 * S),
        ("1d", 86_400 * S),
        ("250 ms", 250_000_000),
        ("10SEC", 10 * S),
    ],
)
def test_every_duration_form_is_read_exactly(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("text", ["", "-1s", "1m30", "abc", "5x", "inf", "nan", "1.2.3s", "s", "1e3", "--3"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ns(text)


@pytest.mark.parametrize(
    ("text", "point"),
    [
        ("90s", TimePoint(offset_ns=90 * S)),
        ("+1m30s", TimePoint(offset_ns=90 * S)),
        ("12", TimePoint(offset_ns=12 * S)),
        ("end-30s", TimePoint(before_end_ns=30 * S)),
        ("-2m", TimePoint(before_end_ns=120 * S)),
        ("@1767323045", TimePoint(wall_ns=1_767_323_045 * S)),
        ("1767323045.25", TimePoint(wall_ns=1_767_323_045 * S + S // 4)),
        ("2026-01-02T03:04:05Z", TimePoint(wall_ns=1_767_323_045 * S)),
        ("2026-01-02T03:04:05.5+00:00", TimePoint(wall_ns=1_767_323_045 * S + S // 2)),
    ],
)
def test_every_time_form_is_read(text: str, point: TimePoint) -> None:
    assert TimePoint.parse(text) == point


def test_a_time_without_a_zone_is_local_time_like_date() -> None:
    local = dt.datetime(2026, 1, 2, 3, 4, 5).astimezone()
    assert TimePoint.parse("2026-01-02T03:04:05").wall_ns == int(local.timestamp()) * S


@pytest.mark.parametrize("text", ["yesterday", "end-x", "2026-13-01", "@x"])
def test_unreadable_times_name_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--from"):
        TimePoint.parse(text, "--from")


def test_points_resolve_against_the_recording_start_and_end() -> None:
    start, end = 1_000 * S, 1_100 * S
    assert TimePoint.parse("10s").resolve(start, end) == 1_010 * S
    assert TimePoint.parse("end-10s").resolve(start, end) == 1_090 * S
    assert TimePoint.parse("@5").resolve(start, end) == 5 * S


@pytest.mark.parametrize("text", ["9" * 40, "@" + "9" * 30, "106752d"])
def test_values_past_64_bit_nanoseconds_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        TimePoint.parse(text)


def test_iso_utc_truncates_to_the_digits_asked_for() -> None:
    from gpuscope.model.times import iso_utc

    at = 1_767_323_045 * S + 123_456_789
    assert iso_utc(at) == "2026-01-02T03:04:05.123Z"
    assert iso_utc(at, 6) == "2026-01-02T03:04:05.123456Z"
    assert iso_utc(at, 9) == "2026-01-02T03:04:05.123456789Z"
