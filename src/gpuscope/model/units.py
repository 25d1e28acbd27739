"""Human units for durations, sizes and counts."""

from __future__ import annotations


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


def parse_duration_s(text: str) -> float:
    """'30', '30s', '5m', '2h', '250ms' -> seconds."""
    t = text.strip().lower()
    for suffix, mult in (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0)):
        if t.endswith(suffix):
            return float(t[: -len(suffix)]) * mult
    return float(t)
