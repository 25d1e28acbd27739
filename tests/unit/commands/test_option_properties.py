"""Properties of the shared option types over generated text: a value in the valid range, or a refusal naming it."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscope.commands._options import (
    INT64_MAX,
    bounded_float,
    bounded_int,
    duration_ns,
    duration_s,
    size_bytes,
    timeout_from_args,
)
from gpuscope.errors import UsageError
from gpuscope.model.units import MAX_NS
from tests.unit.properties import quick

numberish = st.one_of(
    st.text(alphabet="0123456789-+.eE_ xnaifINF", max_size=30),
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=20),
)


@quick(400)
@given(st.integers(-(2**64), 2**64), st.integers(0, 2**64), numberish)
def test_a_bounded_integer_is_inside_its_range_or_refused_with_the_range(lo: int, span: int, text: str) -> None:
    parse = bounded_int(lo, lo + span, "a count")
    try:
        value = parse(text)
    except argparse.ArgumentTypeError as exc:
        assert f"{lo:,} to {lo + span:,}" in str(exc)
        return
    assert isinstance(value, int) and lo <= value <= lo + span


@quick(400)
@given(
    st.floats(-1e6, 1e6),
    st.floats(0, 1e6),
    st.booleans(),
    st.booleans(),
    st.one_of(numberish, st.floats(allow_nan=True).map(str)),
)
def test_a_bounded_number_is_finite_and_inside_its_range_or_refused(
    lo: float, span: float, open_lo: bool, open_hi: bool, text: str
) -> None:
    hi = lo + span
    parse = bounded_float(lo, hi, "a level", open_lo=open_lo, open_hi=open_hi)
    try:
        value = parse(text)
    except argparse.ArgumentTypeError as exc:
        assert "a level" in str(exc)
        return
    assert math.isfinite(value)
    assert (lo < value if open_lo else lo <= value) and (value < hi if open_hi else value <= hi)


@quick(400)
@given(st.one_of(st.text(alphabet="0123456789.smhdnuµ", max_size=16), st.text(max_size=20)))
def test_a_duration_option_is_a_non_negative_number_or_a_usage_error_naming_the_flag(text: str) -> None:
    for read in (lambda t: duration_s("--since", t), lambda t: duration_ns("--since", t)):
        try:
            value = read(text)
        except UsageError as exc:
            assert str(exc).startswith("--since ") and exc.remedy
            continue
        assert 0 <= value <= MAX_NS
    try:
        assert timeout_from_args(text) >= 0
    except UsageError as exc:
        assert str(exc).startswith("--timeout ")


sizes = st.builds(
    "{}{}".format,
    st.one_of(st.integers(-10, 2**70), st.floats(allow_nan=True, allow_infinity=True)),
    st.sampled_from(["", "k", "m", "g", "t", "kb", "MiB", "G", " m"]),
)


@quick(400)
@given(st.one_of(sizes, st.text(alphabet="0123456789.kmgtbiKMGTBI-+e_ naif", max_size=16), st.text(max_size=20)))
def test_a_size_option_is_a_byte_count_a_64_bit_integer_holds_or_a_usage_error(text: str) -> None:
    try:
        value = size_bytes("--max-db", text)
    except UsageError as exc:
        assert str(exc).startswith("--max-db ")
        return
    assert 0 <= value <= INT64_MAX


@pytest.mark.parametrize("text", ["1e18k", "9e9g", "10000000t", "9223372036854775808"])
def test_a_size_past_the_64_bit_range_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--max-db"):
        size_bytes("--max-db", text)
