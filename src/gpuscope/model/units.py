"""Human units for durations, sizes and counts, and the one parser of durations every option uses."""

from __future__ import annotations

import re


def fmt_ns(ns: float) -> str:
    if ns <= 0:
        return "0"
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.2f} s"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_count(n: int) -> str:
    return f"{n:,}"


def parse_size(text: str) -> int:
    """'10g', '500m', '64k', '0' -> bytes."""
    t = text.strip().lower().rstrip("b").rstrip("i")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)


# Units a duration may be written in, longest spelling first within each
# unit; Go's (ns, us, µs, ms, s, m, h, as Ingero's users type them), plus d
# and the spelled-out forms people write in scripts.
_DURATION_UNITS_NS: dict[str, int] = {
    "ns": 1,
    "nsec": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,  # Greek mu, what some keyboards produce instead of the micro sign
    "usec": 1_000,
    "ms": 1_000_000,
    "msec": 1_000_000,
    "s": 1_000_000_000,
    "sec": 1_000_000_000,
    "secs": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "mins": 60_000_000_000,
    "h": 3_600_000_000_000,
    "hr": 3_600_000_000_000,
    "hrs": 3_600_000_000_000,
    "d": 86_400_000_000_000,
    "day": 86_400_000_000_000,
    "days": 86_400_000_000_000,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-zµμ]*)")

# Times and durations are stored as signed 64-bit nanoseconds (until the year 2262).
MAX_NS = 2**63 - 1

DURATION_FORMS = "a number and a unit (ns, us/µs, ms, s, m/min, h, d), compound like 1m30s; a bare number is seconds"


def parse_duration_ns(text: str) -> int:
    """Read a length of time as whole nanoseconds: ``500us``, ``2ms``, ``30s``, ``5min``, ``1m30s``, ``1.5`` (seconds).

    Compound forms add up (``1h2m3.5s``), as in Go's ``time.ParseDuration``.
    Raises ValueError for anything else, including negative and empty text.
    Exact: ``0.1s`` is 100,000,000 ns, not 99,999,999 through a float.
    """
    t = text.strip().lower().replace(" ", "")
    if not t:
        raise ValueError("empty duration")
    parts = list(_DURATION_PART.finditer(t))
    if not parts or "".join(m.group(0) for m in parts) != t:
        raise ValueError(f"not a duration: {text!r}")
    if len(parts) > 1 and not all(m.group(2) for m in parts):
        raise ValueError(f"not a duration: {text!r} (every part of a compound duration needs a unit)")
    total = 0
    for m in parts:
        number, unit = m.group(1), m.group(2) or "s"
        if unit not in _DURATION_UNITS_NS:
            raise ValueError(f"not a duration: {text!r} (unknown unit {unit!r})")
        whole, _, frac = number.partition(".")
        scale = _DURATION_UNITS_NS[unit]
        total += int(whole or 0) * scale
        if frac:
            total += int(frac) * scale // 10 ** len(frac)
    if total > MAX_NS:
        raise ValueError(f"not a duration: {text!r} (longer than {MAX_NS // 86_400_000_000_000:,} days)")
    return total


def parse_duration_s(text: str) -> float:
    """``parse_duration_ns`` in seconds."""
    return parse_duration_ns(text) / 1e9
