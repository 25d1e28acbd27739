"""The run's counts are the traced job's own: other processes' machine-wide host events are counted apart."""

from __future__ import annotations

import numpy as np

from gpuscope.agent.live_stats import LiveStats
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op
from gpuscope.render.summary import render_summary

JOB, CHILD, OTHER = 100, 101, 555


def _events(*rows: tuple[Op, int, bytes, int]) -> np.ndarray:
    """(op, pid, comm, handle) rows, 1 ms each."""
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, (op, pid, comm, handle) in enumerate(rows):
        ev[i]["op"], ev[i]["pid"], ev[i]["comm"], ev[i]["handle"] = int(op), pid, comm, handle
        ev[i]["ts_ns"], ev[i]["duration_ns"] = i, 1_000_000
    return ev


def test_block_io_of_the_job_and_its_children_is_its_own_and_the_rest_is_counted_apart() -> None:
    # given a trace of one command, which forks a child, on a machine where others do I/O too
    stats = LiveStats(targets=set())
    stats.add_target(JOB)
    stats.update(
        _events(
            (Op.block_io, JOB, b"train", 0),
            (Op.process_fork, JOB, b"train", CHILD),  # reported before the child runs
            (Op.block_io, CHILD, b"worker", 0),
            (Op.block_io, OTHER, b"ldconfig", 0),
            (Op.block_io, OTHER, b"ldconfig", 0),
            (Op.tcp_retransmit, 7, b"kworker/0:1H", 0),
            (Op.mm_page_alloc, 0, b"", 0),  # the kernel's bucket for every process not traced
            (Op.sched_switch, JOB, b"train", 0),
        )
    )
    # then the job's own I/O is counted as its events, the others' apart, with who made them
    assert stats.per_op[int(Op.block_io)].count == 2
    assert int(Op.tcp_retransmit) not in stats.per_op and int(Op.mm_page_alloc) not in stats.per_op
    assert stats.others == {int(Op.block_io): 2, int(Op.tcp_retransmit): 1, int(Op.mm_page_alloc): 1}
    assert stats.other_comms[int(Op.block_io)] == {"ldconfig": 2}
    assert stats.other_comms[int(Op.mm_page_alloc)] == {"(other processes)": 1}
    # and the summary says so, in its headline and in a section of its own
    text = render_summary(
        stats.per_op, elapsed_s=1.0, counters={"dropped": 0}, others=stats.others, other_comms=stats.other_comms
    )
    assert text.splitlines()[0] == "4 events in 1.0 s, 0 dropped; 4 more of other processes, kept as possible causes"
    assert "Other processes (machine-wide host events, not counted above" in text
    assert "block_io                       2  ldconfig 2" in text


def test_when_every_process_is_traced_every_event_is_the_runs_own() -> None:
    stats = LiveStats(targets=None)
    stats.update(_events((Op.block_io, OTHER, b"ldconfig", 0), (Op.block_io, JOB, b"train", 0)))
    assert stats.per_op[int(Op.block_io)].count == 2 and stats.others == {}


def test_a_copy_keeps_the_split() -> None:
    stats = LiveStats(targets={JOB})
    stats.update(_events((Op.block_io, OTHER, b"ldconfig", 0)))
    copied = stats.copy()
    assert (copied.targets, copied.others, copied.other_comms) == (
        {JOB},
        {int(Op.block_io): 1},
        {int(Op.block_io): {"ldconfig": 1}},
    )
