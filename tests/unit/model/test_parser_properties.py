"""Properties of the duration, size and time parsers, over generated text: a value in range or a ValueError."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from gpuscope.model.times import TimePoint
from gpuscope.model.units import MAX_NS, parse_duration_ns, parse_size
from tests.unit.properties import quick

UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
UNITS_NS["d"] = 86_400 * 10**9

# Text that looks like what people type, and text that does not.
DURATION_ALPHABET = "0123456789.:+-eE_ nsumhdµμ@TZz"
durationish = st.text(alphabet=DURATION_ALPHABET, max_size=24)
anything = st.one_of(durationish, st.text(max_size=40))


@quick(600)
@given(anything)
def test_any_text_is_a_duration_in_range_or_a_value_error(text: str) -> None:
    try:
        ns = parse_duration_ns(text)
    except ValueError:
        return
    assert isinstance(ns, int) and 0 <= ns <= MAX_NS


@quick(300)
@given(st.integers(min_value=0, max_value=2**70), st.sampled_from(sorted(UNITS_NS)))
def test_a_whole_number_of_a_unit_is_read_exactly_or_refused_past_the_64_bit_range(n: int, unit: str) -> None:
    expected = n * UNITS_NS[unit]
    try:
        got = parse_duration_ns(f"{n}{unit}")
    except ValueError:
        assert expected > MAX_NS
        return
    assert got == expected


@quick(300)
@given(st.integers(0, 10**6), st.text(alphabet="0123456789", min_size=1, max_size=12), st.sampled_from(["s", "ms"]))
def test_a_decimal_is_read_exactly_and_truncated_to_whole_nanoseconds(whole: int, frac: str, unit: str) -> None:
    scale = UNITS_NS[unit]
    assert parse_duration_ns(f"{whole}.{frac}{unit}") == whole * scale + int(frac) * scale // 10 ** len(frac)


@quick(200)
@given(st.integers(0, 10**4), st.integers(0, 59), st.integers(0, 59), st.integers(0, 999))
def test_a_compound_duration_is_the_sum_of_its_parts(h: int, m: int, s: int, ms: int) -> None:
    assert parse_duration_ns(f"{h}h{m}m{s}s{ms}ms") == ((h * 60 + m) * 60 + s) * 10**9 + ms * 10**6


@quick(400)
@given(st.one_of(st.text(alphabet="0123456789.kmgtbiKMGTBI-+e_ naif", max_size=16), st.text(max_size=24)))
def test_any_text_is_a_size_or_a_value_or_overflow_error(text: str) -> None:
    try:
        size = parse_size(text)
    except (ValueError, OverflowError):
        return
    assert isinstance(size, int)


@quick(600)
@given(
    st.one_of(
        st.text(alphabet=DURATION_ALPHABET + "enda", max_size=32),
        st.text(max_size=40),
        st.datetimes(timezones=st.sampled_from([dt.timezone.utc, dt.timezone(dt.timedelta(hours=14))])).map(
            lambda d: d.isoformat()
        ),
        st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: f"@{n}"),
    )
)
def test_any_text_is_one_point_in_the_64_bit_range_or_a_value_error(text: str) -> None:
    try:
        point = TimePoint.parse(text, "--from")
    except ValueError as exc:
        assert str(exc).startswith("--from")
        return
    assert sum(v is not None for v in (point.offset_ns, point.wall_ns, point.before_end_ns)) == 1
    for value in (point.offset_ns, point.wall_ns, point.before_end_ns):
        assert value is None or -MAX_NS <= value <= MAX_NS


@quick(300)
@given(
    st.builds(
        TimePoint,
        offset_ns=st.one_of(st.none(), st.integers(0, MAX_NS)),
        before_end_ns=st.none(),
    ),
    st.integers(-(2**62), 2**62),
    st.integers(0, 2**62),
)
def test_a_resolved_point_stays_a_64_bit_time_however_far_from_the_recording(
    point: TimePoint, start_ns: int, length_ns: int
) -> None:
    resolved = point.resolve(start_ns, start_ns + length_ns)
    assert -(2**63) <= resolved <= MAX_NS
    if point.offset_ns is not None and start_ns + point.offset_ns <= MAX_NS:
        assert resolved == start_ns + point.offset_ns
