"""explain's first line: the window on the wall clock (UTC), its length and events, where it lies in the recording."""

from __future__ import annotations

import datetime as dt

import pytest

from gpuscope.analysis.engine import Report
from gpuscope.analysis.frame import Window
from gpuscope.model.units import fmt_ns
from gpuscope.render.explain import render_report, wall_span, window_line

S = 1_000_000_000
# 2026-01-02T06:58:52Z, and a monotonic clock that read 1,000 s then
WALL = int(dt.datetime(2026, 1, 2, 6, 58, 52, tzinfo=dt.timezone.utc).timestamp()) * S
MONO = 1_000 * S


def _window(
    start_s: float, end_s: float, rec_start_s: float = 0, rec_end_s: float = 31, events: int = 11_622
) -> Window:
    """A window from ``start_s`` to ``end_s`` seconds after the recording's start at WALL."""

    def mono(s: float) -> int:
        return MONO + round(s * S)

    return Window(mono(start_s), mono(end_s), mono(rec_start_s), mono(rec_end_s), WALL - MONO, (1,), events)


def test_the_whole_recording_is_named_so_with_its_wall_clock_ends_and_length() -> None:
    line = window_line(_window(0, 31))
    assert line == f"Window: 2026-01-02 06:58:52–06:59:23 UTC ({fmt_ns(31 * S)}, 11,622 events): the whole recording"
    assert "ending 0" not in line


def test_a_window_that_ends_early_says_how_long_before_the_end() -> None:
    line = window_line(_window(0, 19))
    assert line.endswith(f": from the start of the recording, ending {fmt_ns(12 * S)} before its end")
    assert "06:58:52–06:59:11 UTC" in line


def test_a_window_counted_back_from_the_end_is_the_last_part_of_the_recording() -> None:
    assert window_line(_window(21, 31)).endswith(f": the last {fmt_ns(10 * S)} of the recording")


def test_a_window_inside_the_recording_says_where_both_ends_are() -> None:
    line = window_line(_window(1, 21))
    assert line.endswith(
        f": starting {fmt_ns(1 * S)} after the start of the recording, ending {fmt_ns(10 * S)} before its end"
    )


def test_an_empty_window_past_the_end_says_so_with_units() -> None:
    line = window_line(_window(40, 40, events=0))
    assert "(0 s, 0 events): after the end of the recording" in line


def test_a_short_window_is_shown_to_the_millisecond() -> None:
    assert wall_span(WALL + 120_000_000, WALL + 620_400_000) == "2026-01-02 06:58:52.120–06:58:52.620 UTC"


def test_a_window_across_midnight_shows_both_dates() -> None:
    midnight = int(dt.datetime(2026, 1, 3, tzinfo=dt.timezone.utc).timestamp()) * S
    assert wall_span(midnight - 10 * S, midnight + 10 * S) == "2026-01-02 23:59:50 – 2026-01-03 00:00:10 UTC"


@pytest.mark.parametrize(
    ("end_ns", "shown"), [(WALL + 31 * S - 1, "06:59:23"), (WALL + 31 * S + 400_000_000, "06:59:23")]
)
def test_the_ends_are_rounded_to_the_second_shown(end_ns: int, shown: str) -> None:
    assert wall_span(WALL, end_ns).endswith(f"–{shown} UTC")


def test_a_window_without_a_session_clock_shows_no_made_up_date() -> None:
    w = Window(0, 5 * S, 0, 5 * S, 0, (), 0)
    assert window_line(w) == f"Window: ({fmt_ns(5 * S)}, 0 events): the whole recording"


def test_the_report_starts_with_the_window_line() -> None:
    w = _window(0, 31)
    assert render_report(Report(w, (), (), ())).splitlines()[0] == window_line(w)
