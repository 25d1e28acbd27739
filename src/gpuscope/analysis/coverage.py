"""Estimates for the ops the overhead budget probed in windows (gpuscope.agent.sampling).

A sampled op's calls were recorded exactly inside the recorded probe windows
and not at all outside them. Its count, rate and time over a process's active
seconds are estimated by the ratio of time covered: what the windows saw,
divided by the share of those seconds they covered. Percentiles come from the
calls seen. Every figure built this way is marked estimated, with its coverage.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from gpuscope.model.findings import Caveat, Finding
from gpuscope.model.ops import OPS, Op, OpKind
from gpuscope.model.policy import SAMPLED_PROBE_OPS
from gpuscope.store.coverage_read import probe_window_rows, self_cost_totals, session_spans, window_proc_rows
from gpuscope.store.sessions_read import session_flag_docs

BUCKET_NS = 1_000_000_000
# Always-probed calls that must fall inside the windows for the ratio to them to be trusted.
MIN_ANCHORS = 30
# Probed all the time and stored row by row: the calls a sampled op's count is scaled against.
ANCHOR_OPS = (
    frozenset(
        int(op)
        for op, info in OPS.items()
        if info.kind in (OpKind.SYNC, OpKind.ALLOC, OpKind.FREE, OpKind.GRAPH, OpKind.COLLECTIVE, OpKind.COMM)
    )
    - SAMPLED_PROBE_OPS
)
# A second covered less than this is not estimated from (a rate from a sliver of a window would be noise).
MIN_BUCKET_COVERAGE = 0.004


@dataclass(frozen=True, slots=True)
class Coverage:
    """When a recording's sampled ops were probed: merged intervals (monotonic ns), and which ops."""

    sampled_ops: frozenset[int]
    starts: np.ndarray
    ends: np.ndarray
    budget: float | None = None
    # (pid, window start) -> the share of the window the process ran at its unprobed speed: 1 less its
    # probe time (per calling thread) over the window's length. 1 where unknown.
    speed: dict[tuple[int, int], float] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        sampled_ops: frozenset[int],
        intervals: list[tuple[int, int]],
        budget: float | None = None,
        speed: dict[tuple[int, int], float] | None = None,
    ) -> Coverage:
        """Merge intervals (overlapping or touching ones become one)."""
        merged: list[list[int]] = []
        for s, e in sorted((int(s), int(e)) for s, e in intervals if e > s):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        arr = np.array(merged, dtype=np.int64).reshape(-1, 2)
        return cls(sampled_ops, np.ascontiguousarray(arr[:, 0]), np.ascontiguousarray(arr[:, 1]), budget, speed or {})

    def is_sampled(self, op: int) -> bool:
        return op in self.sampled_ops

    def _covered_before(self, t: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Covered ns in (-inf, t] for each t (each interval's time times its weight, if given)."""
        w = np.ones(len(self.starts)) if weights is None else weights
        lengths = (self.ends - self.starts) * w
        cum = np.concatenate(([0.0], np.cumsum(lengths)))
        i = np.searchsorted(self.ends, t, side="right")
        out = cum[i]
        inside = i < len(self.starts)
        j = np.minimum(i, max(len(self.starts) - 1, 0))
        if len(self.starts):
            out = out + np.where(inside & (self.starts[j] < t), (t - self.starts[j]) * w[j], 0)
        return out

    def fully_covered(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Whether each [start, end] lies inside the windows: only there is a sampled op's absence real.

        An instant (start = end) is inside when the nanosecond from it is.
        """
        s = starts.astype(np.int64)
        e = np.maximum(ends.astype(np.int64), s + 1)
        covered = self._covered_before(e) - self._covered_before(s)
        inside: np.ndarray = covered >= (e - s)
        return inside

    def covered_ns(self, start_ns: int, end_ns: int) -> int:
        """Covered time in [start_ns, end_ns]."""
        t = np.array([start_ns, end_ns], dtype=np.int64)
        c = self._covered_before(t)
        return int(c[1] - c[0])

    def fractions(self, buckets: np.ndarray, width_ns: int = BUCKET_NS) -> np.ndarray:
        """The covered share of each [bucket, bucket + width)."""
        b = buckets.astype(np.int64)
        covered = self._covered_before(b + width_ns) - self._covered_before(b)
        fractions: np.ndarray = covered / float(width_ns)
        return fractions

    def estimate(
        self,
        pid: int,
        span: tuple[int, int],
        buckets: np.ndarray,
        counts: np.ndarray,
        anchors: tuple[int, int] | None = None,
    ) -> float:
        """A process's calls of a sampled op over ``span`` from those seen (``counts`` per second ``buckets``).

        With ``anchors`` (its always-probed calls: all of them, and those inside the windows; see
        ``anchor_counts``), where enough fell inside: the calls seen times all anchors over the anchors
        inside. A loop's mix of launches to syncs does not change when probes slow it, so this needs no
        estimate of the slowdown; it is what a training step gives.

        Otherwise, by time:
        per second of the span, calls in covered time are counted as seen; the uncovered time adds the rate
        the windows saw at the process's unprobed speed (calls over covered time less its probe time). A
        second no window covered takes the rate of the nearest covered seconds.
        """
        if anchors is not None:
            total, inside = anchors
            if inside >= total:
                return float(counts.sum())
            if inside >= MIN_ANCHORS:
                return float(counts.sum()) * total / inside
        lo, hi = span
        if hi <= lo:
            return float(counts.sum())
        first = lo // BUCKET_NS * BUCKET_NS
        edges = np.arange(first, hi + BUCKET_NS, BUCKET_NS, dtype=np.int64)
        starts, ends = np.maximum(edges[:-1], lo), np.minimum(edges[1:], hi)
        active = (ends - starts).astype(np.float64)
        seen = np.zeros(len(starts))
        idx = ((buckets.astype(np.int64) - first) // BUCKET_NS).astype(np.int64)
        ok = (idx >= 0) & (idx < len(seen))
        np.add.at(seen, idx[ok], counts[ok].astype(np.float64))
        weights = np.array([self.speed.get((pid, int(s)), 1.0) for s in self.starts.tolist()])
        covered = self._covered_before(ends) - self._covered_before(starts)
        effective = self._covered_before(ends, weights) - self._covered_before(starts, weights)
        uncovered = np.maximum(active - covered, 0.0)
        rated = (covered >= MIN_BUCKET_COVERAGE * BUCKET_NS) & (uncovered > 0) & (effective > 0)
        rate = np.zeros(len(seen))
        rate[rated] = seen[rated] / effective[rated]
        missing = (uncovered > 0) & ~rated
        if missing.any() and rated.any():
            # Seconds no window covered enough: the rate of the nearest rated seconds.
            known = np.flatnonzero(rated)
            at = np.searchsorted(known, np.flatnonzero(missing))
            left = known[np.clip(at - 1, 0, len(known) - 1)]
            right = known[np.clip(at, 0, len(known) - 1)]
            rate[missing] = (rate[left] + rate[right]) / 2
        return float(seen.sum() + (rate * uncovered).sum())


def load_coverage(conn: sqlite3.Connection, start_ns: int, end_ns: int) -> Coverage | None:
    """The window's coverage, or None when no session in it probed any op in windows (every count exact).

    A session that probed every call (``--record-all``, ``--budget off``, older recordings) counts as covered
    for its whole span.
    """
    docs = session_flag_docs(conn)
    sampled: set[int] = set()
    budgets: list[float] = []
    sampling_sessions: set[int] = set()
    for sid, doc in docs.items():
        names = doc.get("sampled_ops")
        if not isinstance(names, list) or not names:
            continue
        sampling_sessions.add(sid)
        sampled.update(int(Op[n]) for n in names if isinstance(n, str) and n in Op.__members__)
        b = doc.get("budget")
        if isinstance(b, (int, float)):
            budgets.append(float(b))
    if not sampling_sessions or not sampled:
        return None
    lo, hi = start_ns - BUCKET_NS, end_ns + BUCKET_NS
    rows = probe_window_rows(conn, lo, hi)
    intervals = [(s, e) for sid, s, e in rows if sid in sampling_sessions]
    lengths = {s: e - s for _, s, e in rows}
    speed: dict[tuple[int, int], float] = {}
    for start, pid, _calls, probe_ns, threads in window_proc_rows(conn, lo, hi):
        length = lengths.get(start, 0)
        if length > 0:
            # A process slowed by more than 90% in a window is not believed: a measurement gone wrong.
            speed[(int(pid), int(start))] = max(1.0 - probe_ns / max(threads, 1) / length, 0.1)
    for sid, started, stopped in session_spans(conn):
        if sid not in sampling_sessions and started is not None:
            intervals.append((int(started), int(stopped) if stopped is not None else hi))
    return Coverage.of(frozenset(sampled), intervals, max(budgets) if budgets else None, speed)


@dataclass(frozen=True, slots=True)
class ProcessCost:
    """gpuscope's measured cost to one traced process over a window."""

    pid: int
    probe_ns: int  # its probed calls, each times the calibrated cost of its probes
    cpu_ns: int  # its CPU time
    calls: int
    budget: float | None
    # The same over the seconds the budget was in force (after the first seconds, probed whole).
    budgeted_probe_ns: int = 0
    budgeted_cpu_ns: int = 0

    @property
    def share(self) -> float:
        return self.probe_ns / self.cpu_ns if self.cpu_ns > 0 else 0.0

    @property
    def budgeted_share(self) -> float | None:
        return self.budgeted_probe_ns / self.budgeted_cpu_ns if self.budgeted_cpu_ns > 0 else None

    def as_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "share": round(self.share, 5),
            "probe_ns": self.probe_ns,
            "cpu_ns": self.cpu_ns,
            "probed_calls": self.calls,
            "budget": self.budget,
            "budgeted_share": round(b, 5) if (b := self.budgeted_share) is not None else None,
        }


@dataclass(frozen=True, slots=True)
class SamplingSummary:
    """What the overhead budget left for a report: the estimated ops, their coverage, and the measured cost."""

    budget: float | None
    estimated_ops: tuple[str, ...]
    coverage: float | None  # the share of the window the probe windows covered
    self_costs: tuple[ProcessCost, ...]
    unmeasured: tuple[str, ...] = ()  # why a session's self-cost could not be measured (its calibration failed)

    def as_dict(self) -> dict[str, object]:
        return {
            "budget": self.budget,
            "estimated_ops": list(self.estimated_ops),
            "coverage": round(self.coverage, 4) if self.coverage is not None else None,
            "self_cost": [c.as_dict() for c in self.self_costs],
            "self_cost_unmeasured": list(self.unmeasured),
        }


def sampling_summary(
    conn: sqlite3.Connection, estimated_ops: tuple[str, ...], coverage: Coverage | None, start_ns: int, end_ns: int
) -> SamplingSummary | None:
    """The report's summary of sampling and self-cost; None for a recording with neither."""
    costs = tuple(
        ProcessCost(int(pid), int(probe or 0), int(cpu or 0), int(calls or 0), budget, int(bp or 0), int(bc or 0))
        for pid, calls, probe, cpu, budget, bp, bc in self_cost_totals(conn, start_ns, end_ns)
    )
    unmeasured = tuple(
        sorted({str(d["self_cost_error"]) for d in session_flag_docs(conn).values() if d.get("self_cost_error")})
    )
    if coverage is None and not costs and not unmeasured:
        return None
    share = coverage.covered_ns(start_ns, end_ns) / max(end_ns - start_ns, 1) if coverage is not None else None
    budget = coverage.budget if coverage is not None else next((c.budget for c in costs if c.budget), None)
    return SamplingSummary(budget, estimated_ops, min(share, 1.0) if share is not None else None, costs, unmeasured)


def with_sampling_caveats(
    findings: tuple[Finding, ...], coverage: Coverage | None, start_ns: int, end_ns: int
) -> tuple[Finding, ...]:
    """Each finding built on an op probed in windows gets a caveat saying what it could not see."""
    if coverage is None:
        return findings
    share = coverage.covered_ns(start_ns, end_ns) / max(end_ns - start_ns, 1)
    if share >= 0.999:
        return findings
    names = {Op(o).name for o in coverage.sampled_ops}
    out = []
    for f in findings:
        text = " ".join([f.symptom.op or "", *(line for c in f.causes for line in c.evidence)])
        seen = sorted(n for n in names if n in text)
        if not seen:
            out.append(f)
            continue
        caveat = Caveat(
            kind="estimated",
            source=Op[seen[0]].source.value,
            dropped=0,
            share=round(share, 4),
            text=f"{', '.join(seen)} probed {share:.1%} of the window (overhead budget): their counts are "
            "estimates, and their calls, durations and gaps between the windows were not seen "
            "(`gpuscope trace --record-all` sees every call)",
        )
        out.append(replace(f, caveats=(*f.caveats, caveat)))
    return tuple(out)


def sampling_note(conn: sqlite3.Connection) -> str | None:
    """One line for ``query``: which ops' rows hold only the calls inside the probe windows; None if none."""
    cov = load_coverage(conn, -(1 << 62), 1 << 62)
    if cov is None:
        return None
    names = sorted(Op(o).name for o in cov.sampled_ops if o in {int(op) for op in Op})
    short = ", ".join(n for n in names if n.startswith("cuda")) or ", ".join(names)
    return (
        f"note: {short} and their driver twins were probed in windows (the overhead budget): their rows "
        "and aggregates hold only the calls inside probe_windows; `gpuscope explain` estimates the rest"
    )


def anchor_counts(
    pids: np.ndarray, ops: np.ndarray, ts: np.ndarray, coverage: Coverage, totals: Mapping[int, int] | None = None
) -> dict[int, tuple[int, int]]:
    """Per process: (its anchor calls, those inside the windows), from the rows (anchors are all stored).

    ``totals``: the exact anchor counts per process (from the aggregates), where rows may be fewer.
    """
    m = np.isin(ops, np.fromiter(ANCHOR_OPS, dtype=np.int64))
    p, t = pids[m], ts[m]
    inside = coverage.fully_covered(t, t)
    out: dict[int, tuple[int, int]] = {}
    for pid in np.unique(p).tolist():
        mine = p == pid
        total = int(mine.sum())
        if totals is not None:
            total = max(total, totals.get(pid, 0))
        out[pid] = (total, int(inside[mine].sum()))
    return out


def with_sampling(
    conn: sqlite3.Connection,
    findings: tuple[Finding, ...],
    estimated_ops: tuple[str, ...],
    coverage: Coverage | None,
    start_ns: int,
    end_ns: int,
) -> tuple[tuple[Finding, ...], SamplingSummary | None]:
    """A report's findings with their sampling caveats, and its sampling summary (``explain_db``'s last step)."""
    return (
        with_sampling_caveats(findings, coverage, start_ns, end_ns),
        sampling_summary(conn, estimated_ops, coverage, start_ns, end_ns),
    )
