"""Selective storage: which launches keep a row of their own."""

from __future__ import annotations

import numpy as np

from gpuscope.agent.storage_policy import _LAUNCH_OPS, StoragePolicy
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op

LAUNCH = int(Op.cudaLaunchKernel)


class _EventByEvent(StoragePolicy):
    """The first-launch rule one event at a time, as a reference for the vectorised one."""

    def _first_launches(self, ev: np.ndarray, keep: np.ndarray) -> np.ndarray:
        out = np.zeros(len(ev), dtype=bool)
        for i in np.flatnonzero(np.isin(ev["op"], _LAUNCH_OPS) & ~keep).tolist():
            key = (int(ev["pid"][i]), int(ev["handle"][i]))
            if key not in self._seen_kernels:
                self._seen_kernels.add(key)
                out[i] = True
        for i in np.flatnonzero(np.isin(ev["op"], _LAUNCH_OPS) & keep).tolist():
            self._seen_kernels.add((int(ev["pid"][i]), int(ev["handle"][i])))
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
