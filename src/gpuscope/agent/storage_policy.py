"""Which events get a row of their own (selective storage, the default).

Every event is counted exactly in ``event_aggregates``. Individual rows are
kept for what analysis needs one by one, and sampled for the high-rate rest:

- everything during the first ``warmup_s`` seconds of the session, up to
  ``warmup_rate`` rows a second per process of the high-rate ops below (past
  that budget they are sampled as after the warm-up: a loop of launches at
  200k/s would otherwise cost the agent a row each, ~2 µs of CPU beside the
  workload, for rows that repeat one another; each kernel's first launch,
  slow calls and the first launch after a sync are kept all the same);
- synchronizations, allocations and frees, graph and NCCL calls, host
  events (off-CPU intervals, block I/O, retransmits, reclaim, lifecycle);
- calls that failed (non-zero return);
- the first launch of each kernel in each process (cold start is per kernel);
- slow calls: above ``slow_factor`` × the op's running p50;
- one in ``sample_every`` of the remaining launches, copies, memsets and wakeups.

``--record-all`` keeps every row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import OPS, Op, OpKind
from gpuscope.model.policy import SAMPLE_EVERY, SLOW_FACTOR, WARMUP_ROWS_PER_S

SAMPLED_KINDS = {OpKind.LAUNCH, OpKind.COPY, OpKind.SET}
_SAMPLED_OPS = np.array(
    sorted([*(int(o) for o, info in OPS.items() if info.kind in SAMPLED_KINDS), int(Op.sched_wakeup)]), dtype=np.uint16
)
_LAUNCH_OPS = np.array(sorted(int(o) for o, info in OPS.items() if info.kind is OpKind.LAUNCH), dtype=np.uint16)


@dataclass
class StoragePolicy:
    record_all: bool = False
    warmup_s: float = 10.0
    warmup_rate: int = WARMUP_ROWS_PER_S
    slow_factor: float = SLOW_FACTOR
    sample_every: int = SAMPLE_EVERY
    start_ns: int = 0
    _seen_kernels: set[tuple[int, int]] = field(default_factory=set)
    _counters: dict[int, int] = field(default_factory=dict)
    _last_was_sampled: dict[int, bool] = field(default_factory=dict)
    _warm_used: dict[int, int] = field(default_factory=dict)  # (pid << 32 | second) -> rows kept

    def _first_of_runs(self, ev: np.ndarray) -> np.ndarray:
        """The first sampled-kind call after any other CUDA call on the same thread.

        GPU idle time is measured from a synchronization to the next launch or
        copy, so that call must keep its row.
        """
        out = np.zeros(len(ev), dtype=bool)
        api = np.flatnonzero(ev["op"] < 192)  # CUDA, driver and NCCL calls
        if not len(api):
            return out
        tids = ev["tid"][api]
        sampled = np.isin(ev["op"][api], _SAMPLED_OPS)
        order = np.argsort(tids, kind="stable")
        t, smp = tids[order], sampled[order]
        prev = np.empty(len(order), dtype=bool)
        prev[1:] = smp[:-1]
        starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        prev[starts] = [self._last_was_sampled.get(int(x), True) for x in t[starts]]
        ends = np.r_[starts[1:], len(t)] - 1
        for tid, last in zip(t[ends].tolist(), smp[ends].tolist(), strict=True):
            self._last_was_sampled[tid] = last
        out[api[order[smp & ~prev]]] = True
        return out

    def keep(self, ev: np.ndarray, per_op: dict[int, LatencyHistogram]) -> np.ndarray:
        """Boolean mask of the rows to store."""
        n = len(ev)
        if self.record_all or n == 0:
            return np.ones(n, dtype=bool)
        keep = ~np.isin(ev["op"], _SAMPLED_OPS)
        warm = ev["ts_ns"] < self.start_ns + int(self.warmup_s * 1e9)
        if warm.any():
            keep |= self._within_warmup_budget(ev, warm & ~keep)
        keep |= ev["ret"] != 0
        # One in N of each op, by arrival order (a counter per op: one shared
        # counter would alias with the call pattern of a training step).
        ops = ev["op"]
        for op in np.unique(ops[~keep]).tolist():
            sel = np.flatnonzero((ops == op) & ~keep)
            start = self._counters.get(op, 0)
            self._counters[op] = start + len(sel)
            keep[sel[(np.arange(start, start + len(sel)) % self.sample_every) == 0]] = True
        for op in np.unique(ev["op"][~keep]).tolist():
            hist = per_op.get(op)
            if hist is None or hist.count < 20:
                continue
            sel = (ev["op"] == op) & ~keep
            keep[sel] = ev["duration_ns"][sel] > self.slow_factor * hist.percentile(50)
        keep |= self._first_of_runs(ev)
        keep |= self._first_launches(ev, keep)
        return keep

    def _within_warmup_budget(self, ev: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """The warm-up rows of high-rate ops within each process's budget for their second, in arrival order."""
        out = np.zeros(len(ev), dtype=bool)
        idx = np.flatnonzero(candidates)
        if not len(idx):
            return out
        second = (ev["ts_ns"][idx].astype(np.int64) - self.start_ns) // 1_000_000_000
        keys = (ev["pid"][idx].astype(np.int64) << 32) | np.maximum(second, 0)
        order = np.argsort(keys, kind="stable")
        k = keys[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        sizes = np.diff(np.r_[starts, len(k)])
        used = np.array([self._warm_used.get(int(x), 0) for x in k[starts].tolist()], dtype=np.int64)
        allowed = np.maximum(self.warmup_rate - used, 0)
        rank = np.arange(len(k)) - np.repeat(starts, sizes)
        out[idx[order[rank < np.repeat(allowed, sizes)]]] = True
        for key, u, n in zip(k[starts].tolist(), used.tolist(), sizes.tolist(), strict=True):
            self._warm_used[key] = min(self.warmup_rate, u + n)
        return out

    def _first_launches(self, ev: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """The first launch of each kernel (pid, function) never seen before, where no other rule kept it.

        Work per distinct kernel in the batch, not per launch: a batch holds
        thousands of launches of a few dozen kernels.
        """
        out = np.zeros(len(ev), dtype=bool)
        is_launch = np.isin(ev["op"], _LAUNCH_OPS)
        if not is_launch.any():
            return out
        pids, handles = ev["pid"], ev["handle"]
        for pid in np.unique(pids[is_launch]).tolist():
            mine = np.flatnonzero(is_launch & (pids == pid))
            # return_index: the first occurrence of each handle, in arrival order.
            uniq, first = np.unique(handles[mine], return_index=True)
            for h, i in zip(uniq.tolist(), mine[first].tolist(), strict=True):
                if (pid, h) not in self._seen_kernels:
                    self._seen_kernels.add((pid, h))
                    out[i] = not keep[i]
        return out
