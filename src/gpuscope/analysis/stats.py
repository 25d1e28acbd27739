"""Exact statistics from stored events, effect sizes, and the severity rubric."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.coverage import Coverage
from gpuscope.analysis.frame import BUCKET_NS, Aggregates
from gpuscope.analysis.intervals import distinct
from gpuscope.model.findings import RATIO_FLOOR_NS, Effect, LatencyHistogram, Severity, TimeSeries
from gpuscope.model.latency import bucket_value
from gpuscope.model.ops import op_name

# The share of a process's active time the probe windows must cover for its sampled counts to be exact.
FULLY_COVERED = 0.999


def pct(values: np.ndarray, p: float) -> int:
    """Exact nearest-rank percentile (the value at rank ceil(p/100 * n)); 0 for no values."""
    if len(values) == 0:
        return 0
    return int(np.percentile(values, p, method="inverted_cdf"))


@dataclass(frozen=True, slots=True)
class OpStats:
    op: str
    pid: int | None
    count: int
    total_ns: int
    p50_ns: int
    p95_ns: int
    p99_ns: int
    max_ns: int
    time_share: float  # of the span's wall clock
    rate_per_s: float
    # Probed in windows under the overhead budget: count, total, share and rate are estimates from the
    # share ``coverage`` of the process's active time the windows covered (percentiles from the calls seen).
    estimated: bool = False
    coverage: float | None = None
    seen: int | None = None  # calls recorded in the windows, when estimated

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "op": self.op,
            "pid": self.pid,
            "count": self.count,
            "total_ns": self.total_ns,
            "p50_ns": self.p50_ns,
            "p95_ns": self.p95_ns,
            "p99_ns": self.p99_ns,
            "max_ns": self.max_ns,
            "time_share": round(self.time_share, 4),
            "rate_per_s": round(self.rate_per_s, 2),
        }
        if self.estimated:
            d["estimated"] = True
            d["coverage"] = round(self.coverage or 0.0, 4)
            d["seen"] = self.seen
        return d


def op_stats(
    op_ids: np.ndarray, durs: np.ndarray, wall_ns: int, pid: int | None = None, *, time_ns: int | None = None
) -> list[OpStats]:
    """Per-op statistics: group once, then exact percentiles per op by partition (linear, not a full sort).

    Rates are per second of ``wall_ns``; time shares are of ``time_ns`` (default ``wall_ns``): for several
    processes, the sum of their active times, so that a share stays a share of the time there was.
    """
    if len(op_ids) == 0:
        return []
    order = np.argsort(op_ids, kind="stable")
    ops_sorted = op_ids[order]
    uniq, first, counts = np.unique(ops_sorted, return_index=True, return_counts=True)
    out = []
    wall = max(wall_ns, 1)
    budget = max(time_ns if time_ns is not None else wall_ns, 1)
    for op, f, n in zip(uniq.tolist(), first.tolist(), counts.tolist(), strict=True):
        d = durs[order[f : f + n]]
        p50, p95, p99 = (int(v) for v in np.percentile(d, [50, 95, 99], method="inverted_cdf"))
        total = int(d.sum())
        out.append(OpStats(op_name(op), pid, n, total, p50, p95, p99, int(d.max()), total / budget, n / (wall / 1e9)))
    out.sort(key=lambda s: -s.total_ns)
    return out


def hist_pct(hist: np.ndarray, p: float, lo: int = 0, hi: int | None = None) -> int:
    """Nearest-rank percentile read from a 1/16-octave histogram (within 4.4 %), clamped to [lo, hi]."""
    n = int(hist.sum())
    if n == 0:
        return 0
    rank = max(1, math.ceil(p / 100.0 * n))
    idx = int(np.searchsorted(np.cumsum(hist), rank))
    v = round(bucket_value(idx))
    v = max(v, lo)
    return min(v, hi) if hi is not None else v


def agg_op_stats(
    aggs: Aggregates,
    ops: frozenset[int],
    wall_ns: int,
    pid: int | None = None,
    *,
    time_ns: int | None = None,
    coverage: Coverage | None = None,
    spans: Mapping[int, tuple[int, int]] | None = None,
    anchors: Mapping[int, tuple[int, int]] | None = None,
) -> list[OpStats]:
    """Per-op statistics from exact aggregates: counts, totals and max exact, percentiles from histograms.

    The same numbers whether rows were stored selectively or all of them. ``time_ns`` as in ``op_stats``.
    An op ``coverage`` says was probed in windows gets estimated counts and totals (``estimate``).
    """
    m = aggs.mask(pid, ops)
    out = []
    wall = max(wall_ns, 1)
    budget = max(time_ns if time_ns is not None else wall_ns, 1)
    for op in distinct(aggs.op[m]).tolist():
        k = m & (aggs.op == op)
        n = int(aggs.count[k].sum())
        if n == 0:
            continue
        total, lo, hi = int(aggs.sum_ns[k].sum()), int(aggs.min_ns[k].min()), int(aggs.max_ns[k].max())
        h = aggs.hist(pid, int(op))
        p50, p95, p99 = (hist_pct(h, q, lo, hi) for q in (50, 95, 99))
        if coverage is not None and coverage.is_sampled(int(op)):
            est, est_total, cov = estimate(aggs, coverage, k, spans, anchors)
            # A process whose whole active time the windows covered (its first seconds, a short run) was
            # probed whole: its counts are exact.
            if cov < FULLY_COVERED:
                out.append(
                    OpStats(
                        op_name(int(op)), pid, est, est_total, p50, p95, p99, hi, est_total / budget,
                        est / (wall / 1e9), estimated=True, coverage=cov, seen=n,
                    )
                )  # fmt: skip
                continue
        out.append(OpStats(op_name(int(op)), pid, n, total, p50, p95, p99, hi, total / budget, n / (wall / 1e9)))
    out.sort(key=lambda s: (-s.total_ns, s.op))
    return out


def estimate(
    aggs: Aggregates,
    coverage: Coverage,
    rows: np.ndarray,
    spans: Mapping[int, tuple[int, int]] | None = None,
    anchors: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[int, int, float]:
    """(count, total ns, coverage) of a sampled op's aggregate ``rows``, estimated per process.

    ``spans``: each process's active time (first call to last call's end); by default the seconds it has
    aggregates in. ``anchors``: per process, its always-probed calls and those inside the windows
    (``Coverage.estimate``). The coverage returned is the count-weighted share of that time the windows
    covered.
    """
    count = total = weighted = 0.0
    seen = 0
    for p in distinct(aggs.pid[rows]).tolist():
        mine = rows & (aggs.pid == p)
        n, t = int(aggs.count[mine].sum()), int(aggs.sum_ns[mine].sum())
        span = (spans or {}).get(p)
        if span is None:
            b = aggs.bucket[aggs.pid == p]
            span = (int(b.min()), int(b.max()) + BUCKET_NS)
        est = coverage.estimate(p, span, aggs.bucket[mine], aggs.count[mine], (anchors or {}).get(p))
        count += est
        total += t * est / n if n else 0.0
        weighted += n * min(coverage.covered_ns(*span) / max(span[1] - span[0], 1), 1.0)
        seen += n
    return round(count), round(total), weighted / seen if seen else 0.0


def slowest_n(n: int) -> int:
    """How many of the slowest calls the 'share of slowest calls' looks at: 1%, at least 10."""
    return min(n, max(10, math.ceil(0.01 * n)))


# Bins of an evidence histogram: four a decade (x1.78), at most this many (nine decades, 1 us to 1000 s).
HIST_BINS_PER_DECADE = 4
HIST_MAX_BINS = 36


def latency_histogram(dur: np.ndarray, affected: np.ndarray) -> LatencyHistogram:
    """The calls' durations in log-spaced bins, the affected ones apart: what an effect size summarises, drawn."""
    d = np.maximum(dur.astype(np.float64), 1.0)
    if not len(d):
        return LatencyHistogram((), (), ())
    lo = math.floor(math.log10(float(d.min())) * HIST_BINS_PER_DECADE)
    hi = max(math.ceil(math.log10(float(d.max())) * HIST_BINS_PER_DECADE), lo + 1)
    lo = max(lo, hi - HIST_MAX_BINS)
    edges = np.unique(np.round(10.0 ** (np.arange(lo, hi + 1) / HIST_BINS_PER_DECADE)).astype(np.int64))
    # Calls below the lowest edge (when the range was cut) count in the first bin, as numpy counts the last.
    clipped = np.clip(d, edges[0], edges[-1])
    aff, _ = np.histogram(clipped[affected], bins=edges)
    una, _ = np.histogram(clipped[~affected], bins=edges)
    return LatencyHistogram(tuple(edges.tolist()), tuple(aff.tolist()), tuple(una.tolist()))


# Points of an evidence series at most: a chart a few hundred pixels wide shows no more.
SERIES_MAX_BINS = 240
SERIES_MIN_BIN_NS = 1_000_000


def rate_series(label: str, counts: np.ndarray, start_ns: int, bin_ns: int) -> TimeSeries:
    """Calls per second in each bin of ``bin_ns`` from ``start_ns``, neighbouring bins merged to at most
    SERIES_MAX_BINS (the last merged bin may be shorter: its rate is over its own length)."""
    k = max(1, -(-len(counts) // SERIES_MAX_BINS))
    at = np.arange(0, len(counts), k)
    sums = np.add.reduceat(counts.astype(np.float64), at) if len(counts) else np.zeros(0)
    widths = np.diff(np.append(at, len(counts))) * bin_ns
    return TimeSeries(label, "/s", start_ns, bin_ns * k, tuple((sums * 1e9 / widths).tolist()))


def covered_share_series(
    label: str, starts: np.ndarray, ends: np.ndarray, t0: int, t1: int, max_bins: int = SERIES_MAX_BINS
) -> TimeSeries | None:
    """The share (%) of each bin of [t0, t1) inside the intervals [starts, ends) (in time order, apart); None
    when the span is empty. Bins of at least SERIES_MIN_BIN_NS, at most ``max_bins`` (and SERIES_MAX_BINS)."""
    span = t1 - t0
    if span <= 0:
        return None
    nb = int(min(SERIES_MAX_BINS, max_bins, max(1, span // SERIES_MIN_BIN_NS)))
    bin_ns = -(-span // nb)
    edges = t0 + bin_ns * np.arange(nb + 1, dtype=np.int64)
    s, e = starts.astype(np.int64), ends.astype(np.int64)
    done = np.concatenate(([0], np.cumsum(e - s)))
    # Time inside the intervals before each edge: the intervals ended by then, and the one it falls in so far.
    i = np.searchsorted(e, edges, side="right")
    inside = done[i]
    j = np.minimum(i, len(s) - 1)
    if len(s):
        inside = inside + np.where((i < len(s)) & (s[j] < edges), edges - s[j], 0)
    share = np.diff(inside) / bin_ns * 100.0
    return TimeSeries(label, "%", t0, int(bin_ns), tuple(np.clip(share, 0.0, 100.0).tolist()))


def effect_size(dur: np.ndarray, affected: np.ndarray, cause_ns: np.ndarray) -> Effect:
    """Compare calls the cause overlapped with calls it did not.

    With fewer than 3 unaffected calls there is no baseline, so the
    counterfactual is the affected calls with the cause's time removed.
    """
    n = len(dur)
    n_aff = int(affected.sum())
    aff_p50 = pct(dur[affected], 50)
    if n - n_aff >= 3:
        un_p50 = pct(dur[~affected], 50)
    else:
        # No call escaped the cause: the counterfactual is each call without
        # the cause's time, floored at 1 µs (no CUDA API call is faster), so a
        # cause covering whole calls does not produce a ratio "vs 0".
        un_p50 = max(pct(np.maximum(dur[affected] - cause_ns[affected], 0), 50), 1_000)
    ratio = aff_p50 / max(un_p50, RATIO_FLOOR_NS) if n_aff else 0.0
    k = slowest_n(n)
    top = np.argsort(dur, kind="stable")[n - k :] if n else np.zeros(0, dtype=np.int64)
    overlapped = int(affected[top].sum())
    p50_all = pct(dur, 50)
    excess = np.maximum(dur - p50_all, 0)
    explained = int(np.minimum(cause_ns, excess)[affected].sum())
    total_excess = int(excess.sum())
    return Effect(
        affected_calls=n_aff,
        unaffected_calls=n - n_aff,
        affected_p50_ns=aff_p50,
        unaffected_p50_ns=un_p50,
        p50_ratio=float(ratio),
        slowest_n=k,
        slowest_overlapped=overlapped,
        excess_share=explained / total_excess if total_excess else 0.0,
        explained_ns=explained,
    )


# A cause is reported only when its effect is measurable: thresholds of docs/explain.md.
MIN_AFFECTED = 3
MIN_RATIO = 1.5
MIN_EXCESS_SHARE = 0.2
MIN_SLOWEST_SHARE = 0.5


def measurable(e: Effect) -> bool:
    return (
        e.affected_calls >= MIN_AFFECTED
        and e.p50_ratio >= MIN_RATIO
        and (e.excess_share >= MIN_EXCESS_SHARE or e.slowest_share >= MIN_SLOWEST_SHARE)
    )


def severity_for(lost_ns: int, wall_ns: int, slowdown: float = 1.0) -> Severity:
    """The rubric (docs/explain.md): share of wall time lost, then slowdown factor."""
    share = lost_ns / wall_ns if wall_ns > 0 else 0.0
    if share >= 0.5:
        return Severity.CRITICAL
    if share >= 0.2 or (slowdown >= 10 and share >= 0.05):
        return Severity.HIGH
    if share >= 0.05 or (slowdown >= 3 and share >= 0.01):
        return Severity.MEDIUM
    return Severity.LOW
