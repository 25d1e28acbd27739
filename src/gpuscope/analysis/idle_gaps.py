"""Where a process's GPU sat idle for want of work: the gaps between a synchronisation and its next GPU call.

After a synchronisation returns, the process has nothing queued on the GPU (on that stream) until its next
call: that interval is idle GPU time for sure where every call in it was recorded. How a recording stored
its calls decides which gaps are known:

- gpuscope's own recordings hold every call, or launches probed in windows (the overhead budget): a gap
  counts only inside a window (``Coverage``), and its share is of the time the windows covered.
- recordings of the reference system (imported) hold every call of a session's first 10 s, then syncs,
  anomalies and samples, with exact per-bucket counts beside them (``ImportedRates``). A gap is exact where
  the counts (or, in a file without counts, the store-all window) say every call in it was stored.
  Elsewhere a gap may hide unstored launches: it is bounded by the shape of the batches stored whole, at
  most ``n`` calls issued within ``lead`` before their sync, so it ends at the next sync's start less
  ``lead`` at the latest. The counts check that shape in every bucket the gap crosses (no unstored sync,
  no more calls than ``n`` per sync whose lead falls in the bucket); a gap whose buckets break it is left
  out, and one that no count covers rests on the shape alone (``unchecked``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.frame import GPU_WORK, SYNC_OPS
from gpuscope.analysis.imported_rates import STORE_ALL_NS, ImportedRates
from gpuscope.analysis.intervals import merge, overlap_ns
from gpuscope.model.op_table import in_ops
from gpuscope.model.units import fmt_ns

STARVE_GAP_NS = 1_000_000
STARVE_MIN_SYNC_NS = 100_000
MIN_SYNCS = 5


@dataclass(frozen=True, slots=True)
class IdleGaps:
    """The idle gaps of one process, each at least STARVE_GAP_NS; the arrays are parallel, in time order.

    ``tid``: the thread whose call ended the gap (the feeding thread).
    ``start``/``end``: a sync's end and the next GPU call (or the bound on it).
    ``idle``: the ns of each gap that no other process's GPU work covered.
    ``inferred``: per gap, True where its end rests on the batch shape, not on stored rows.
    ``unchecked``: how many inferred gaps no count of the recording could check.
    ``dropped``: gaps left out because what they may hide cannot be bounded.
    ``syncs``, ``quick``: how many synchronisations, and whether their median wait was under 100 µs.
    ``wall_ns``: the time the gaps are a share of. ``basis``: what the gaps rest on ("" when on every call).
    """

    pid: int
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    idle: np.ndarray
    inferred: np.ndarray
    unchecked: int
    dropped: int
    syncs: int
    quick: bool
    wall_ns: int
    basis: str


def idle_gaps(ctx: Context, pid: int) -> IdleGaps | None:
    """The gaps of ``pid`` during which its GPU is known idle; None with fewer than MIN_SYNCS syncs."""
    f = ctx.frame
    w = ctx.calls[ctx.pid_calls_of(pid, GPU_WORK)]
    is_sync = in_ops(f.op[w], SYNC_OPS)
    syncs = int(is_sync.sum())
    if syncs < MIN_SYNCS:
        return None
    quick = float(np.median(f.dur[w[is_sync]])) < STARVE_MIN_SYNC_NS
    after = np.flatnonzero(is_sync[:-1])
    start = f.ts[w[after]] + f.dur[w[after]]
    end = raw_end = np.maximum(f.ts[w[after + 1]], start)
    known = np.ones(len(after), dtype=bool)
    inferred = np.zeros(len(after), dtype=bool)
    wall = ctx.pid_span_ns(pid)
    imp = ctx.imported_rates
    bounds: _Bounds | None = None
    if imp is not None and pid in imp.pids:
        bounds = _imported_bounds(ctx, imp, pid, w, is_sync, start, end)
        end, known, inferred = bounds.end, bounds.known, bounds.inferred
    elif ctx.coverage is not None:
        # Launches and copies are probed in windows (the overhead budget): a gap is known to be free of them
        # only inside a window; one that reaches outside may hide a whole step's work.
        known = ctx.coverage.fully_covered(start, end)
        lo, hi = ctx.call_spans.get(pid, (0, 0))
        wall = min(wall, max(ctx.coverage.covered_ns(lo, hi), 1))
    # A GPU shared with other processes is not idle while they use it.
    ps, pe = ctx.peer_work_spans(pid)
    idle = (end - start) - overlap_ns(start, end, ps, pe)
    long = known & (idle >= STARVE_GAP_NS)
    unchecked = int((long & bounds.unchecked).sum()) if bounds is not None else 0
    # Counted at their length between stored rows: what they would have claimed.
    dropped = int((~known & (raw_end - start >= STARVE_GAP_NS)).sum()) if bounds is not None else 0
    basis = bounds.basis(long, unchecked, dropped) if bounds is not None else ""
    tid = f.tid[w[after + 1]]
    return IdleGaps(
        pid,
        tid[long],
        start[long],
        end[long],
        idle[long],
        inferred[long],
        unchecked,
        dropped,
        syncs,
        quick,
        wall,
        basis,
    )


@dataclass(frozen=True, slots=True)
class _Counts:
    """Per bucket of the reference's counts: non-sync GPU work counted, and calls it did not store."""

    origin: int
    width: int
    work: np.ndarray
    hidden: np.ndarray  # calls of any GPU work op beyond the stored rows
    hidden_syncs: np.ndarray

    @property
    def end(self) -> int:
        return self.origin + len(self.work) * self.width

    def bucket(self, ts: np.ndarray) -> np.ndarray:
        index: np.ndarray = (ts - self.origin) // self.width
        return index


def _counts(ctx: Context, imp: ImportedRates, pid: int, w: np.ndarray) -> _Counts | None:
    """The reference's counts of ``pid``'s GPU work beside its stored rows ``w``; None where it kept none."""
    keys = [k for k in imp.series if k[0] == pid and k[1] in GPU_WORK]
    if not keys:
        return None
    f, width = ctx.frame, imp.width_ns
    origin = min(imp.series[k][0] for k in keys)
    nb = max((imp.series[k][0] - origin) // width + len(imp.series[k][1]) for k in keys)
    work, hidden, hidden_syncs = (np.zeros(nb, dtype=np.int64) for _ in range(3))
    for k in keys:
        first, counted = imp.series[k]
        at = (first - origin) // width
        counts = np.zeros(nb, dtype=np.int64)
        counts[at : at + len(counted)] = counted
        b = (f.ts[w[f.op[w] == k[1]]] - origin) // width
        stored = np.bincount(b[(b >= 0) & (b < nb)].astype(np.int64), minlength=nb)
        # A bucket can count fewer calls than rows stored for it (seen in real files): the larger holds.
        missing = np.maximum(counts - stored, 0)
        hidden += missing
        if k[1] in SYNC_OPS:
            hidden_syncs += missing
        else:
            work += np.maximum(counts, stored)
    return _Counts(origin, width, work, hidden, hidden_syncs)


def _complete_spans(counts: _Counts | None, store_all: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray]:
    """Where the rows hold every call: buckets whose counts equal their rows; without counts, the store-all
    windows (the counts are the better witness where there are some: they also see the rows a store-all
    window lost)."""
    starts, ends = [], []
    lo, hi = (counts.origin, counts.end) if counts is not None else (0, 0)
    for s, e in store_all:
        for a, b in ((s, min(e, lo)), (max(s, hi), e)) if counts is not None else ((s, e),):
            if a < b:
                starts.append(a)
                ends.append(b)
    if counts is not None:
        full = np.flatnonzero(counts.hidden == 0)
        starts.extend((counts.origin + full * counts.width).tolist())
        ends.extend((counts.origin + (full + 1) * counts.width).tolist())
    return merge(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class _Bounds:
    """Each gap of an imported process: its end, whether it is known, and whether its end is inferred."""

    end: np.ndarray
    known: np.ndarray
    inferred: np.ndarray
    unchecked: np.ndarray
    counts: _Counts | None
    whole: int  # batches stored whole
    calls: int
    lead_ns: int

    def basis(self, long: np.ndarray, unchecked: int, dropped: int) -> str:
        """What the gaps rest on, for the finding's text."""
        exact = int((long & ~self.inferred).sum())
        inferred = int((long & self.inferred).sum())
        why = (
            "its counts match its rows there"
            if self.counts is not None
            else f"the reference stores every call of a session's first {STORE_ALL_NS // 10**9} s"
        )
        text = f"{exact} gap{'s' if exact != 1 else ''} where the file holds every call ({why})"
        if inferred:
            text += (
                f"; {inferred} where it kept only syncs and samples, each cut at the next sync less the lead of the "
                f"{self.whole} batch{'es' if self.whole != 1 else ''} it stored whole (at most {self.calls} calls, "
                f"issued within {fmt_ns(self.lead_ns)} before their sync)"
            )
            checked = inferred - unchecked
            if checked:
                text += f"; {checked} checked against its per-{self.counts_width()} counts"
                text += f", {unchecked} not (no count there)" if unchecked else ""
            else:
                text += (
                    "; the file kept no counts to check that shape, nor that every sync was stored (the "
                    "reference's rule)"
                )
        if dropped:
            text += f"; {dropped} gap{'s' if dropped != 1 else ''} left out: what they may hide cannot be bounded"
        return text

    def counts_width(self) -> str:
        return f"{self.counts.width / 1e9:g} s" if self.counts is not None else "?"


def _imported_bounds(
    ctx: Context, imp: ImportedRates, pid: int, w: np.ndarray, is_sync: np.ndarray, start: np.ndarray, end: np.ndarray
) -> _Bounds:
    """Bound each gap of a process the reference recorded selectively (see the module's docstring)."""
    f = ctx.frame
    counts = _counts(ctx, imp, pid, w)
    cs, ce = _complete_spans(counts, imp.store_all)
    exact = overlap_ns(start, end, cs, ce) >= end - start
    sp = np.flatnonzero(is_sync)
    k = np.arange(len(start))
    has_next = k + 1 < len(sp)
    nxt = sp[np.minimum(k + 1, len(sp) - 1)]
    nxt_start = f.ts[w[nxt]]
    nxt_end = nxt_start + f.dur[w[nxt]]
    # A batch: the calls from a sync's end to the next sync's end. Stored whole, it shows the loop's shape.
    whole = has_next & (overlap_ns(start, np.maximum(nxt_end, start), cs, ce) >= nxt_end - start)
    calls = nxt - sp[k] - 1
    lead = np.where(calls > 0, nxt_start - f.ts[w[np.minimum(sp[k] + 1, len(w) - 1)]], 0)
    none = np.zeros(len(start), dtype=bool)
    if not whole.any():
        return _Bounds(end, exact, none, none, counts, 0, 0, 0)
    n_max, lead_max = int(calls[whole].max()), int(lead[whole].max())
    bounded = np.clip(nxt_start - lead_max, start, end)
    ok, unchecked = _shape_holds(counts, f.ts[w[sp]], n_max, lead_max, start, nxt_end)
    inferred = ~exact & has_next
    known = exact | (inferred & ok)
    return _Bounds(
        np.where(exact, end, bounded),
        known,
        inferred & known,
        inferred & known & unchecked,
        counts,
        int(whole.sum()),
        n_max,
        lead_max,
    )


def _shape_holds(
    counts: _Counts | None, sync_starts: np.ndarray, n_max: int, lead_ns: int, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per span [start, end]: whether no bucket it crosses breaks the shape, and whether some part of it has
    no count to check it by (then it rests on the shape alone)."""
    if counts is None:
        return np.ones(len(start), dtype=bool), np.ones(len(start), dtype=bool)
    nb = len(counts.work)
    # Per bucket: the syncs whose lead (the time their batch's calls are issued in) touches it.
    first = np.clip(counts.bucket(sync_starts - lead_ns), 0, nb)
    last = np.clip(counts.bucket(sync_starts) + 1, 0, nb)
    edges = np.zeros(nb + 1, dtype=np.int64)
    np.add.at(edges, first, 1)
    np.add.at(edges, last, -1)
    batches = np.cumsum(edges[:nb])
    bad = (counts.hidden_syncs > 0) | (counts.work > n_max * batches)
    bad_before = np.concatenate(([0], np.cumsum(bad)))
    lo = np.clip(counts.bucket(start), 0, nb)
    hi = np.clip(counts.bucket(end) + 1, 0, nb)
    ok = bad_before[hi] - bad_before[np.minimum(lo, hi)] == 0
    outside = (start < counts.origin) | (end >= counts.end)
    return ok, outside


__all__ = ["MIN_SYNCS", "STARVE_GAP_NS", "STARVE_MIN_SYNC_NS", "IdleGaps", "idle_gaps"]
