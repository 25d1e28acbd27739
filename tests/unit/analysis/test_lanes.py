"""Thread lanes: each thread's shares of each pixel interval in GPU calls, preempted and blocked."""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.frame import EventFrame
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


def _preempted_by_two() -> EventFrame:
    """A thread in one 30 ms sync: preempted by cpu_hog at 2-6 ms and 14-16 ms and by logger at 10-12 ms, and
    asleep at 20-25 ms (a switch that names pid 777, which did not preempt it)."""
    ev = Events(comms={100: "train", 999: "cpu_hog", 555: "logger"})
    ev.add(Op.cudaStreamSynchronize, 0, 30 * MS)
    ev.sched(2 * MS, 4 * MS, preempted=True, by_pid=999)
    ev.sched(10 * MS, 2 * MS, preempted=True, by_pid=555)
    ev.sched(14 * MS, 2 * MS, preempted=True, by_pid=999)
    ev.sched(20 * MS, 5 * MS, preempted=False, by_pid=777)
    frame, _ = ev.frame()
    return frame


def test_a_lane_names_who_held_its_cpu_while_it_was_preempted_most_time_first() -> None:
    # given a thread preempted 6 ms by a hog and 2 ms by a logger, and asleep 5 ms (not preempted: nobody named)
    frame = _preempted_by_two()
    (lane,) = thread_lanes(frame, 0, 30 * MS, 10)
    # then the preemptors are the hog then the logger, with the time each held the CPU
    assert lane.preemptors == ((999, "cpu_hog", 6 * MS), (555, "logger", 2 * MS))
    assert lane.as_dict()["preemptors"] == [
        {"pid": 999, "comm": "cpu_hog", "ns": 6 * MS},
        {"pid": 555, "comm": "logger", "ns": 2 * MS},
    ]


def test_each_pixel_names_who_held_the_threads_cpu_most_while_it_was_preempted_there() -> None:
    # given the same thread: the hog at 2-6 ms and 14-16 ms, the logger at 10-12 ms, asleep at 20-25 ms
    frame = _preempted_by_two()
    # when reduced to 15 pixels of 2 ms
    (lane,) = thread_lanes(frame, 0, 30 * MS, 15)
    # then each pixel says who held the CPU there, and nobody where it was not preempted (asleep included)
    assert lane.held_by == ((999, "cpu_hog"), (555, "logger"))
    assert lane.top_preemptor is not None
    who = [lane.held_by[i][1] if i >= 0 else None for i in lane.top_preemptor.tolist()]
    assert who == [None, "cpu_hog", "cpu_hog", None, None, "logger", None, "cpu_hog", *[None] * 7]
    assert lane.as_dict()["held_by"] == [{"pid": 999, "comm": "cpu_hog"}, {"pid": 555, "comm": "logger"}]


def test_a_ranks_lane_has_its_nccl_calls_apart_and_says_its_rank() -> None:
    # given a rank whose all-reduce takes the second half of a 20 ms window, after a 5 ms sync
    ev = Events(comms={100: "train"})
    ev.add(Op.cudaStreamSynchronize, 0, 5 * MS)
    ev.add(Op.ncclAllReduce, 10 * MS, 10 * MS)
    frame, _ = ev.frame()
    # when reduced to 4 pixels, the process known as rank 3
    (lane,) = thread_lanes(frame, 0, 20 * MS, 4, ranks={100: 3})
    # then its NCCL band is the all-reduce only, inside its GPU band, and the lane names its rank
    assert lane.nccl is not None and lane.nccl.tolist() == [0, 0, 1, 1]
    assert lane.gpu.tolist() == [1, 0, 1, 1]
    assert lane.rank == 3 and lane.as_dict()["rank"] == 3


def test_a_lane_without_nccl_calls_has_no_nccl_band() -> None:
    ev = Events()
    ev.add(Op.cudaStreamSynchronize, 0, 5 * MS)
    frame, _ = ev.frame()
    (lane,) = thread_lanes(frame, 0, 20 * MS, 4)
    assert lane.nccl is None and lane.as_dict()["nccl"] is None and lane.rank is None


def test_a_threads_direct_reclaim_is_a_band_of_its_own() -> None:
    # given a thread that spent 5 ms of a 20 ms window in direct reclaim during its sync
    ev = Events()
    ev.add(Op.cudaStreamSynchronize, 0, 20 * MS)
    ev.add(Op.direct_reclaim, 5 * MS, 5 * MS)
    frame, _ = ev.frame()
    (lane,) = thread_lanes(frame, 0, 20 * MS, 4)
    assert lane.reclaim is not None and lane.reclaim.tolist() == [0, 1, 0, 0]
    assert lane.as_dict()["reclaim"] == [0, 1, 0, 0]


def test_a_spans_intervals_kept_once_give_every_width_the_lanes_read_afresh() -> None:
    """The server keeps a span's merged intervals and reduces them per width asked: the same lanes as a fresh read."""
    from gpuscope.analysis.lanes import lane_intervals, reduce_lanes

    ev = Events(comms={100: "train", 300: "hog"})
    ev.add(Op.cudaLaunchKernel, 1 * MS, 2 * MS)
    ev.add(Op.cudaStreamSynchronize, 3 * MS, 9 * MS)
    ev.sched(5 * MS, 3 * MS, preempted=True, by_pid=300)
    ev.sched(14 * MS, 2 * MS, preempted=False)
    frame, _ = ev.frame()
    kept = lane_intervals(frame, 0, 20 * MS)
    for width in (1, 3, 7, 40):
        (fresh,) = thread_lanes(frame, 0, 20 * MS, width)
        (reduced,) = reduce_lanes(kept, 0, 20 * MS, width)
        assert reduced.as_dict() == fresh.as_dict()
        assert reduced.top_op is not None and reduced.top_preemptor is not None
