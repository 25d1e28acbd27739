"""Thread lanes: each thread's shares of each pixel interval in GPU calls, preempted and blocked."""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.lanes import thread_lanes
from gpuscope.model.ops import Op
from tests.unit.analysis.builder import MS, Events


def test_each_interval_holds_the_share_of_it_the_thread_spent_in_each_state() -> None:
    # given a sync of 10 ms, then 5 ms preempted, then 5 ms asleep, over a 20 ms window of 4 pixels
    ev = Events(comms={100: "train"})
    ev.add(Op.cudaStreamSynchronize, 0, 10 * MS)
    ev.sched(10 * MS, 5 * MS, preempted=True)
    ev.sched(15 * MS, 5 * MS, preempted=False)
    frame, _ = ev.frame()
    # when reduced to 4 pixels
    (lane,) = thread_lanes(frame, 0, 20 * MS, 4)
    # then
    assert (lane.pid, lane.tid, lane.comm, lane.gpu_ns) == (100, 100, "train", 10 * MS)
    assert lane.gpu.tolist() == [1, 1, 0, 0]
    assert lane.preempted.tolist() == [0, 0, 1, 0]
    assert lane.blocked.tolist() == [0, 0, 0, 1]


def test_a_call_across_pixel_edges_is_shared_out_and_overlapping_calls_count_once() -> None:
    ev = Events()
    ev.add(Op.cudaLaunchKernel, 2 * MS, 6 * MS)  # 2..8 ms
    ev.add(Op.cuLaunchKernel, 3 * MS, 2 * MS)  # inside it: the driver call under the runtime one
    frame, _ = ev.frame()
    (lane,) = thread_lanes(frame, 0, 10 * MS, 2)
    assert np.allclose(lane.gpu, [0.6, 0.6]) and lane.gpu_ns == 6 * MS


def test_lanes_are_the_threads_that_call_the_gpu_busiest_first_and_capped() -> None:
    ev = Events(comms={100: "a", 200: "b"})
    ev.add(Op.cudaStreamSynchronize, 0, 1 * MS, pid=100)
    ev.add(Op.cudaStreamSynchronize, 0, 5 * MS, pid=200)
    ev.sched(0, 5 * MS, pid=300, preempted=True)  # a thread that never calls the GPU has no lane
    frame, _ = ev.frame()
    lanes = thread_lanes(frame, 0, 10 * MS, 10)
    assert [(x.pid, x.gpu_ns) for x in lanes] == [(200, 5 * MS), (100, 1 * MS)]
    assert [x.pid for x in thread_lanes(frame, 0, 10 * MS, 10, max_lanes=1)] == [200]
    # and the width is bounded whatever is asked
    assert len(thread_lanes(frame, 0, 10 * MS, 10**9)[0].gpu) == 2_000
