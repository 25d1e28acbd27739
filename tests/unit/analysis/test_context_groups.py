"""The analysis context's call groupings: warm groups leave out exactly the cold calls; a process's positions."""

from __future__ import annotations

import numpy as np

from gpuscope.model.ops import Op

from .builder import MS, US, Events


def _job() -> Events:
    # One process: 20 launches of kernel A, then kernel B first launched (slow) at the 10th launch, and 20
    # syncs of which the first is slow; every other call takes 10 us
    ev = Events()
    for k in range(20):
        kernel = 0xB if k >= 10 and k % 2 else 0xA
        first_b = k == 11
        ev.add(Op.cudaLaunchKernel, k * MS, 5 * MS if k == 0 or first_b else 10 * US, handle=kernel)
        ev.add(Op.cudaStreamSynchronize, k * MS + 500 * US, 5 * MS if k == 0 else 10 * US)
    return ev


def test_warm_groups_leave_out_each_cold_call_whether_first_or_not() -> None:
    # given a launch group whose cold calls are its first and its 12th (kernel B's first), and a sync group
    # whose only cold call is its first
    ctx = _job().context()
    launch, sync = int(Op.cudaLaunchKernel), int(Op.cudaStreamSynchronize)
    cold = {int(p) for p in np.flatnonzero(ctx.cold)}
    every = {op: pos for _pid, op, pos in ctx.groups(min_count=1, warm_only=False)}
    # when
    warm = {op: pos for _pid, op, pos in ctx.groups(min_count=1)}
    # then
    assert cold == {int(every[launch][0]), int(every[launch][11]), int(every[sync][0])}
    for op in (launch, sync):
        assert warm[op].tolist() == [p for p in every[op].tolist() if p not in cold]


def test_a_process_with_every_call_has_every_position_and_one_with_some_only_its_own() -> None:
    ev = _job()
    alone = ev.context()
    assert alone.pid_calls(100).tolist() == list(range(len(alone.calls)))
    # given a second process's sync in the middle
    ev.add(Op.cudaStreamSynchronize, 7 * MS + 100 * US, 10 * US, pid=200)
    ctx = ev.context()
    pids = ctx.frame.pid[ctx.calls]
    assert ctx.pid_calls(100).tolist() == np.flatnonzero(pids == 100).tolist()
    assert ctx.pid_calls(200).tolist() == np.flatnonzero(pids == 200).tolist()
