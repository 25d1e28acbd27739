"""What changed between two recordings: per-op counts, rates, percentiles and a significance test.

The test is Mann–Whitney U on call durations (two-sided, normal
approximation with tie correction; numpy only). Many ops are tested at once,
so the significance level is Bonferroni-corrected; and with millions of calls
even a 1 % shift is "significant", so a change must also be large enough to
matter (``min_p50_ratio`` or ``min_p99_ratio``) to be flagged.
"""

from __future__ import annotations

import enum
import math
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuscope.errors import GpuscopeError
from gpuscope.query.filters import EventFilter
from gpuscope.query.finding_sources import explain_findings, finding_marker, stored_markers
from gpuscope.query.guarded import open_reader
from gpuscope.store.events_read import call_chunks

ENTRY_ONLY = 1


class Change(enum.Enum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    NEW = "new"
    GONE = "gone"
    UNTIMED = "untimed"  # no durations to compare (entry-only records, lifecycle events)


_ORDER = {
    Change.REGRESSION: 0,
    Change.NEW: 1,
    Change.GONE: 2,
    Change.IMPROVEMENT: 3,
    Change.UNCHANGED: 4,
    Change.UNTIMED: 5,
}


@dataclass(frozen=True, slots=True)
class DiffOptions:
    """``alpha``: family-wise significance level (divided by the number of tested ops).
    ``min_p50_ratio``/``min_p99_ratio``: smallest slowdown (or speed-up, inverted) worth flagging.
    ``max_samples``: calls per op given to the test (an even random subsample above it; percentiles use all).
    """

    alpha: float = 0.01
    min_p50_ratio: float = 1.10
    min_p99_ratio: float = 1.50
    max_samples: int = 100_000
    seed: int = 0


@dataclass
class OpSample:
    """Every call of one op in one recording: durations (timed calls only) and the count of all calls."""

    op: str
    count: int = 0
    durations: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class RunProfile:
    """One recording reduced to per-op samples and its span (for rates)."""

    label: str
    span_ns: int
    ops: dict[str, OpSample]


@dataclass(frozen=True, slots=True)
class OpDiff:
    op: str
    change: Change
    count_a: int
    count_b: int
    rate_a: float
    rate_b: float
    p50_a: int
    p50_b: int
    p95_a: int
    p95_b: int
    p99_a: int
    p99_b: int
    p_value: float | None
    prob_slower: float | None  # P(a call of B is slower than a call of A): 0.5 = no shift

    @property
    def p50_ratio(self) -> float | None:
        return self.p50_b / self.p50_a if self.p50_a > 0 and self.count_b else None

    @property
    def p99_ratio(self) -> float | None:
        return self.p99_b / self.p99_a if self.p99_a > 0 and self.count_b else None

    def as_dict(self) -> dict[str, Any]:
        r50, r99 = self.p50_ratio, self.p99_ratio
        return {
            "op": self.op,
            "change": self.change.value,
            "count_a": self.count_a,
            "count_b": self.count_b,
            "rate_a": round(self.rate_a, 3),
            "rate_b": round(self.rate_b, 3),
            "p50_a_ns": self.p50_a,
            "p50_b_ns": self.p50_b,
            "p95_a_ns": self.p95_a,
            "p95_b_ns": self.p95_b,
            "p99_a_ns": self.p99_a,
            "p99_b_ns": self.p99_b,
            "p50_ratio": None if r50 is None else round(r50, 3),
            "p99_ratio": None if r99 is None else round(r99, 3),
            "p_value": self.p_value,
            "prob_slower": None if self.prob_slower is None else round(self.prob_slower, 4),
        }


@dataclass(frozen=True, slots=True)
class FindingsDiff:
    """Findings keyed by ``kind:op`` (pids differ between runs), present in only one recording."""

    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    both: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DiffReport:
    a: str
    b: str
    span_a_ns: int
    span_b_ns: int
    ops: tuple[OpDiff, ...]
    alpha_per_op: float
    findings: FindingsDiff | None = None
    notes: tuple[str, ...] = ()

    @property
    def regressions(self) -> tuple[OpDiff, ...]:
        return tuple(o for o in self.ops if o.change is Change.REGRESSION)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "a": self.a,
            "b": self.b,
            "span_a_ns": self.span_a_ns,
            "span_b_ns": self.span_b_ns,
            "alpha_per_op": self.alpha_per_op,
            "ops": [o.as_dict() for o in self.ops],
            "notes": list(self.notes),
        }
        if self.findings is not None:
            d["findings"] = {
                "only_a": list(self.findings.only_a),
                "only_b": list(self.findings.only_b),
                "both": list(self.findings.both),
            }
        return d


def average_ranks(x: np.ndarray) -> tuple[np.ndarray, float]:
    """1-based ranks with ties averaged, and the tie term sum(t³ − t) for the variance correction."""
    order = np.argsort(x, kind="mergesort")
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(avg, counts)
    c = counts.astype(np.float64)
    return ranks, float(np.sum(c**3 - c))


def mann_whitney_u(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sided Mann–Whitney U test of ``a`` against ``b``.

    Returns (p value, P(b > a) + ½ P(b = a)). Normal approximation with tie
    and continuity corrections: fine from ~20 values per side.
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0, 0.5
    ranks, ties = average_ranks(np.concatenate([a, b]))
    u_b = float(ranks[n1:].sum()) - n2 * (n2 + 1) / 2.0
    n = n1 + n2
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0, u_b / (n1 * n2)
    z = (abs(u_b - mu) - 0.5) / math.sqrt(var)
    return float(math.erfc(max(z, 0.0) / math.sqrt(2.0))), u_b / (n1 * n2)


def profile(conn: sqlite3.Connection, label: str, chunk: int = 100_000) -> RunProfile:
    """Read every call of the (possibly filtered) ``events`` view of ``conn`` into per-op samples."""
    parts: dict[str, list[np.ndarray]] = {}
    counts: dict[str, int] = {}
    bounds: dict[int, list[int]] = {}
    for rows in call_chunks(conn, chunk):
        ops = np.array([r[0] or "?" for r in rows], dtype=object)
        arr = np.array([r[1:] for r in rows], dtype=np.int64).reshape(-1, 4)
        for sid in np.unique(arr[:, 0]).tolist():
            ts = arr[arr[:, 0] == sid, 1]
            lo, hi = int(ts.min()), int(ts.max())
            b = bounds.setdefault(int(sid), [lo, hi])
            b[0], b[1] = min(b[0], lo), max(b[1], hi)
        timed = (arr[:, 2] > 0) & ((arr[:, 3] & ENTRY_ONLY) == 0)
        for op in set(ops.tolist()):
            m = ops == op
            counts[op] = counts.get(op, 0) + int(m.sum())
            parts.setdefault(op, []).append(arr[m & timed, 2])
    samples = {
        op: OpSample(op, counts[op], np.concatenate(parts[op]) if parts[op] else np.empty(0, np.int64)) for op in counts
    }
    span = sum(hi - lo for lo, hi in bounds.values())
    return RunProfile(label, span, samples)


def _pct(x: np.ndarray, q: float) -> int:
    return int(np.percentile(x, q)) if len(x) else 0


def _subsample(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return x if len(x) <= n else rng.choice(x, size=n, replace=False)


def compare(
    a: RunProfile,
    b: RunProfile,
    options: DiffOptions = DiffOptions(),
    findings: FindingsDiff | None = None,
    notes: Iterable[str] = (),
) -> DiffReport:
    """Compare two profiles op by op; regressions first (largest p50 slowdown first)."""
    rng = np.random.default_rng(options.seed)
    names = sorted(set(a.ops) | set(b.ops))
    tested = [n for n in names if n in a.ops and n in b.ops and len(a.ops[n].durations) and len(b.ops[n].durations)]
    alpha = options.alpha / max(1, len(tested))
    diffs = []
    out_notes = list(notes)
    for name in names:
        sa, sb = a.ops.get(name, OpSample(name)), b.ops.get(name, OpSample(name))
        da, db = sa.durations, sb.durations
        p_value: float | None = None
        prob: float | None = None
        if name in tested:
            if len(da) > options.max_samples or len(db) > options.max_samples:
                out_notes.append(f"{name}: test on a random {options.max_samples:,} calls per side")
            p_value, prob = mann_whitney_u(
                _subsample(da, options.max_samples, rng), _subsample(db, options.max_samples, rng)
            )
        d = OpDiff(
            name,
            Change.UNCHANGED,
            sa.count,
            sb.count,
            sa.count / (a.span_ns / 1e9) if a.span_ns > 0 else 0.0,
            sb.count / (b.span_ns / 1e9) if b.span_ns > 0 else 0.0,
            _pct(da, 50),
            _pct(db, 50),
            _pct(da, 95),
            _pct(db, 95),
            _pct(da, 99),
            _pct(db, 99),
            p_value,
            prob,
        )
        diffs.append(_classify(d, sa, sb, alpha, options))
    diffs.sort(key=lambda d: (_ORDER[d.change], -_slowdown(d), -(d.count_a + d.count_b)))
    return DiffReport(a.label, b.label, a.span_ns, b.span_ns, tuple(diffs), alpha, findings, tuple(out_notes))


def _slowdown(d: OpDiff) -> float:
    r = d.p50_ratio
    if d.change is Change.IMPROVEMENT and r:
        return 1 / r
    return r or 0.0


def _classify(d: OpDiff, sa: OpSample, sb: OpSample, alpha: float, o: DiffOptions) -> OpDiff:
    if sa.count == 0:
        return replace(d, change=Change.NEW)
    if sb.count == 0:
        return replace(d, change=Change.GONE)
    if d.p_value is None or d.prob_slower is None:
        return replace(d, change=Change.UNTIMED)
    r50, r99 = d.p50_ratio or 1.0, d.p99_ratio or 1.0
    if d.p_value < alpha:
        if d.prob_slower > 0.5 and (r50 >= o.min_p50_ratio or r99 >= o.min_p99_ratio):
            return replace(d, change=Change.REGRESSION)
        if d.prob_slower < 0.5 and (r50 <= 1 / o.min_p50_ratio or r99 <= 1 / o.min_p99_ratio):
            return replace(d, change=Change.IMPROVEMENT)
    return d


def findings_diff(a: Iterable[str], b: Iterable[str]) -> FindingsDiff:
    """Compare two collections of finding keys."""
    sa, sb = set(a), set(b)
    return FindingsDiff(tuple(sorted(sa - sb)), tuple(sorted(sb - sa)), tuple(sorted(sa & sb)))


def diff_databases(
    path_a: str | os.PathLike[str],
    path_b: str | os.PathLike[str],
    options: DiffOptions = DiffOptions(),
    *,
    event_filter: EventFilter | None = None,
    with_findings: bool = True,
) -> DiffReport:
    """Compare two databases (each opened read-only, the same filter applied to both).

    Findings come from the explain engine (nothing stored); when it fails on
    either file, from the latest stored run; when neither is available the
    report has no findings section and a note says why.
    """
    profiles = []
    notes: list[str] = []
    for path in (path_a, path_b):
        with open_reader(path, event_filter=event_filter, timeout_s=0) as reader:
            profiles.append(profile(reader.conn, os.fspath(path)))
            left_out = reader.sessions_note()
            if left_out:
                notes.append(f"{os.fspath(path)}: {left_out.removeprefix('note: ')}")
    fdiff = None
    if with_findings:
        f = event_filter if event_filter is not None else EventFilter()
        keys_a, note_a = _finding_keys(path_a, f)
        keys_b, note_b = _finding_keys(path_b, f)
        notes += [n for n in (note_a, note_b) if n]
        if keys_a is not None and keys_b is not None:
            fdiff = findings_diff(keys_a, keys_b)
    return compare(profiles[0], profiles[1], options, fdiff, notes)


def diff_windows(
    path: str | os.PathLike[str],
    window_a: EventFilter,
    window_b: EventFilter,
    options: DiffOptions = DiffOptions(),
) -> DiffReport:
    """Compare two windows of one recording (before and after a change mid-run), without findings."""
    profiles = []
    for label, window in (("a", window_a), ("b", window_b)):
        with open_reader(path, event_filter=window, timeout_s=0) as reader:
            profiles.append(profile(reader.conn, f"{os.fspath(path)} ({label})"))
    return compare(profiles[0], profiles[1], options, None, ["two windows of one recording: findings not compared"])


def _finding_keys(path: str | os.PathLike[str], f: EventFilter) -> tuple[list[str] | None, str]:
    try:
        found = explain_findings(path, since_ns=f.since_ns, sessions=f.sessions)
        return [finding_marker(x).compare_key for x in found], ""
    except (ImportError, GpuscopeError, sqlite3.Error, ValueError) as exc:
        reason = f"explain failed on {os.fspath(path)} ({exc})"
    with open_reader(path, timeout_s=0) as reader:
        stored = stored_markers(reader.conn)
        if stored is None:
            return None, f"no findings for {os.fspath(path)}: {reason}, and no stored findings"
        return [m.compare_key for m in stored], f"{reason}; used the stored findings"
