"""Selective storage: which launches keep a row of their own."""

from __future__ import annotations

import numpy as np

from gpuscope.agent.storage_policy import _LAUNCH_OPS, StoragePolicy
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op

LAUNCH = int(Op.cudaLaunchKernel)


class _EventByEvent(StoragePolicy):
    """The first-launch rule one event at a time, as a reference for the vectorised one."""

    def _first_launches(self, ev: np.ndarray, keep: np.ndarray) -> np.ndarray:
        out = np.zeros(len(ev), dtype=bool)
        for i in np.flatnonzero(np.isin(ev["op"], _LAUNCH_OPS)).tolist():
            key = (int(ev["pid"][i]), int(ev["handle"][i]))
            if key not in self._seen_kernels:
                self._seen_kernels.add(key)
                out[i] = not keep[i]
        return out


def _launches(pids: list[int], handles: list[int], t0: int = 0) -> np.ndarray:
    ev = np.zeros(len(pids), dtype=EVENT_DTYPE)
    ev["op"] = LAUNCH
    ev["pid"] = ev["tid"] = pids
    ev["handle"] = handles
    ev["ts_ns"] = t0 + np.arange(len(pids))
    ev["duration_ns"] = 500
    return ev


def test_the_first_launch_of_each_kernel_in_each_process_keeps_its_row_once() -> None:
    # given a policy past its warm-up whose one-in-N sample has taken its first launch
    policy = StoragePolicy(warmup_s=0.0, sample_every=10**9)
    policy.keep(_launches([1], [0xDEAD]), {})

    # when two processes launch two kernels, each several times, over two batches
    first = policy.keep(_launches([1, 1, 2, 1, 2, 2], [0xA, 0xA, 0xA, 0xB, 0xA, 0xB]), {})
    again = policy.keep(_launches([1, 2, 2, 3], [0xB, 0xB, 0xC, 0xA]), {})

    # then only each (process, kernel)'s first launch is kept
    assert first.tolist() == [True, False, True, True, False, True]
    assert again.tolist() == [False, False, True, True]


def test_first_launches_match_the_event_by_event_rule_over_many_batches() -> None:
    # given random batches of launches mixed with other calls, from three processes
    rng = np.random.default_rng(3)
    fast, reference = StoragePolicy(warmup_s=0.0), _EventByEvent(warmup_s=0.0)
    ops = [LAUNCH, int(Op.cudaLaunchKernelExC), int(Op.cudaMemcpyAsync), int(Op.cudaStreamSynchronize)]
    for b in range(12):
        n = int(rng.integers(1, 3_000))
        ev = _launches(rng.choice([5, 6, 7], n).tolist(), rng.integers(0, 400, n).tolist(), t0=b * 10_000)
        ev["op"] = rng.choice(ops, n, p=[0.7, 0.1, 0.1, 0.1])
        ev["tid"] = ev["pid"] * 10 + rng.integers(0, 2, n)

        # when both decide
        got, want = fast.keep(ev, {}), reference.keep(ev, {})

        # then they keep the same rows and remember the same kernels
        assert got.tolist() == want.tolist()
        assert fast._seen_kernels == reference._seen_kernels


def test_the_warm_up_keeps_every_row_up_to_its_budget_per_process_and_second() -> None:
    # given a policy in its warm-up with a budget of 50 high-rate rows a second per process
    policy = StoragePolicy(warmup_s=10.0, warmup_rate=50, sample_every=10**9, start_ns=0)
    policy._counters[LAUNCH] = 1  # its one-in-N sample has taken its pick

    # when two processes each launch one kernel 80 times in second 0, over two batches, then 30 times in second 1
    s0 = _launches([1] * 80 + [2] * 80, [0xF] * 160, t0=1)
    s0["pid"][80:] = 2
    kept = [policy.keep(s0[:100], {}), policy.keep(s0[100:], {})]
    s1 = _launches([1] * 30, [0xF] * 30, t0=1_000_000_000)
    again = policy.keep(s1, {})

    # then each process keeps its first 50 rows of second 0 (its kernel's first launch among them), the rest
    # of that second is left to sampling, and second 1 has a budget of its own
    first = np.concatenate(kept)
    assert int(first[:80].sum()) == 50 and bool(first[:50].all())
    assert int(first[80:].sum()) == 50 and bool(first[80:130].all())
    assert again.all()


def test_the_warm_up_budget_applies_to_high_rate_ops_only() -> None:
    # given a policy in its warm-up with a budget of 5 rows a second
    policy = StoragePolicy(warmup_s=10.0, warmup_rate=5, sample_every=10**9, start_ns=0)
    policy._counters[LAUNCH] = 1

    # when a process makes 20 syncs and 20 launches of one kernel in its first second
    ev = _launches([1] * 40, [0xA] * 40)
    ev["op"][:20] = int(Op.cudaStreamSynchronize)
    ev["tid"][:20] = 2  # another thread: each launch on thread 1 follows a launch, not the syncs
    keep = policy.keep(ev, {})

    # then every sync keeps its row, and 5 launches do
    assert keep[:20].all()
    assert int(keep[20:].sum()) == 5


def test_past_the_warm_up_budget_slow_calls_still_keep_their_rows() -> None:
    # given a policy in its warm-up with a budget of 10 rows a second, and an op whose median is 500 ns
    hist = LatencyHistogram.empty()
    hist.add(np.full(100, 500, dtype=np.int64))
    policy = StoragePolicy(warmup_s=10.0, warmup_rate=10, sample_every=10**9, start_ns=0)
    policy._counters[LAUNCH] = 1

    # when 100 launches of one kernel come in one second and the last is 100x slower
    ev = _launches([1] * 100, [0xA] * 100)
    ev["duration_ns"][-1] = 50_000
    keep = policy.keep(ev, {LAUNCH: hist})

    # then the first 10 and the slow one are kept
    assert np.flatnonzero(keep).tolist() == [*range(10), 99]
