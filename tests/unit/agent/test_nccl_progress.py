"""The agent finds a hung NCCL rank from the rows it reads, with no SQL and no child process."""

from __future__ import annotations

import numpy as np

from gpuscope.agent.nccl_progress import NcclProgress
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op
from gpuscope.tui.live_findings import NcclHangFindings

S = 1_000_000_000
MS = 1_000_000
HASH = 0x5EED


def _rows(*rows: tuple[Op, int, int, int]) -> np.ndarray:
    """(op, pid, entry ns, duration ns) rows; an init's rank is pid - 100."""
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, (op, pid, ts, dur) in enumerate(rows):
        r = ev[i]
        r["op"], r["pid"], r["ts_ns"], r["duration_ns"], r["comm"] = int(op), pid, ts, dur, b"trainer"
        if op is Op.ncclCommInitRank:
            r["arg0"], r["arg1"], r["stream"] = pid - 100, 3, HASH
    return ev


def _job(steps: dict[int, int]) -> NcclProgress:
    """Three ranks (pids 100-102) that joined one communicator, each returning ``steps[pid]`` allreduces, 1 s apart."""
    progress = NcclProgress()
    progress.update(_rows(*[(Op.ncclCommInitRank, pid, 0, MS) for pid in steps]))
    rows = [(Op.ncclAllReduce, pid, (k + 1) * S, MS) for pid, n in steps.items() for k in range(n)]
    progress.update(_rows(*sorted(rows, key=lambda r: r[2])))
    return progress


def test_a_rank_silent_past_the_threshold_while_its_peers_go_on_is_hung_and_named() -> None:
    # given rank 2 whose 5th allreduce never returned, while ranks 0 and 1 went on to 10
    progress = _job({100: 10, 101: 10, 102: 4})
    now = 11 * S
    # when the live source looks with a 2 s threshold
    (line,) = NcclHangFindings(progress, 2 * S, clock_ns=lambda: now).findings(None)  # type: ignore[arg-type]
    # then rank 2 is named, for how long, in which call, and how far its peers went
    assert line.startswith("CRITICAL nccl-hang: rank 2 (trainer, pid 102) has not returned from NCCL for 7"), line
    assert "so far (stuck in or before ncclAllReduce)" in line
    assert "rank 0 (trainer, pid 100) completed 6 more, rank 1 (trainer, pid 101) completed 6 more" in line


def test_no_hang_below_the_threshold_or_when_every_rank_stopped() -> None:
    progress = _job({100: 10, 101: 10, 102: 9})
    hangs = NcclHangFindings(progress, 2 * S, clock_ns=lambda: 11 * S)
    assert hangs.findings(None) == []  # type: ignore[arg-type]
    # the whole job paused 30 s: nobody went on, so nobody is behind
    paused = NcclHangFindings(_job({100: 5, 101: 5, 102: 5}), 2 * S, clock_ns=lambda: 40 * S)
    assert paused.findings(None) == []  # type: ignore[arg-type]
    assert paused.finding_counts() == {}


def test_a_rank_that_exited_is_silent_until_its_exit_not_until_now() -> None:
    progress = _job({100: 10, 101: 10, 102: 4})
    progress.update(_rows((Op.process_exit, 102, 5 * S, 0)))
    lines = NcclHangFindings(progress, 500 * MS, clock_ns=lambda: 60 * S).findings(None)  # type: ignore[arg-type]
    (line,) = lines
    assert "has not returned from NCCL for 999.0 ms until it exited" in line and "until it exited" in line, line


def test_a_call_that_returned_after_the_threshold_is_the_other_shape_and_counted_for_metrics() -> None:
    progress = _job({100: 3, 101: 3})
    # rank 1's 4th allreduce entered at 4 s and returned 5 s later, together with rank 0's
    progress.update(_rows((Op.ncclAllReduce, 101, 4 * S, 5 * S), (Op.ncclAllReduce, 100, 9 * S, MS)))
    hangs = NcclHangFindings(progress, 2 * S, clock_ns=lambda: 10 * S)
    (line,) = hangs.findings(None)  # type: ignore[arg-type]
    assert (
        line
        == "CRITICAL nccl-hang: rank 1 (trainer, pid 101) was blocked in ncclAllReduce for 5.00 s before it returned"
    )
    assert hangs.finding_counts() == {("nccl-hang", "CRITICAL"): 1}


def test_attached_to_a_running_job_only_what_peers_returned_after_counts() -> None:
    # given no init seen (attached with --pid to a running job): counts since the attach differ by chance
    progress = NcclProgress()
    rows = [(Op.ncclAllReduce, 100, k * S, MS) for k in range(1, 11)] + [(Op.ncclAllReduce, 101, S, MS)]
    progress.update(_rows(*sorted(rows, key=lambda r: r[2])))
    (line,) = NcclHangFindings(progress, 2 * S, clock_ns=lambda: 11 * S).findings(None)  # type: ignore[arg-type]
    # then pid 101 is behind by what pid 100 returned after its last call (9), not by a difference of totals
    assert line.startswith("CRITICAL nccl-hang: trainer, pid 101 has not returned"), line
    assert line.endswith("trainer, pid 100 completed 9 more")
