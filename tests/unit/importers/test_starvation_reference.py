"""data-starvation on the reference's recordings: a DataLoader run starved by its own host, named as such from
selective rows (with or without the file's counts), and told apart from a GPU used now and then, a server
waiting for requests, waits for block I/O and an outside CPU hog."""

from __future__ import annotations

import random
from pathlib import Path

from gpuscope.analysis.engine import ExplainOptions, Report, explain_db
from gpuscope.importers import import_file
from gpuscope.model.findings import Finding, Severity
from gpuscope.model.ops import Op
from tests.unit.analysis.builder import Events, slow_syncs, steady_training
from tests.unit.importers.reference_recording import (
    BLOCK_READ,
    FORK,
    LAUNCH,
    MEM_ALLOC,
    MEMCPY,
    MEMCPY_ASYNC,
    MS,
    STREAM_SYNC,
    US,
    Reference,
    S,
)

MAIN = 4100
WORKERS = tuple(range(4101, 4109))
# Seconds between the GPU uses of the negative cases: irregular, as requests or user actions come.
IRREGULAR_S = (0.8, 5.2, 0.3, 2.9, 7.1, 1.4, 0.5, 4.4, 2.2, 6.3, 0.9, 3.6)


def _dataloader(*, bursts_between: int = 0) -> Reference:
    """77 s of a PyTorch DataLoader run as the reference recorded it (the shape of the issue's file).

    The model goes to the GPU, then a batch every 6.2-6.6 s: a copy, 4 launches, a 60 µs sync, the GPU idle
    until the next. The feeding (main) thread is on-CPU throughout: 871 switches, 49 µs each. At 38 s it
    forks 8 DataLoader workers, whose switches fill the rest (a tenth of the real file's 190k). Launches
    after the store-all window are kept 1 in 10. ``bursts_between``: launches the process also makes 3 s
    after each later batch, none stored (the gaps then hide work only the file's counts show).
    """
    rng = random.Random(35)
    r = Reference(77.0, names={MAIN: "python3", **{w: "pt_data_worker" for w in WORKERS}})
    at = 500 * MS
    for _ in range(6):
        r.add(at, MAIN, MEM_ALLOC, 40 * US)
        at += 2 * MS
    for _ in range(40):
        r.add(at, MAIN, MEMCPY, 300 * US)
        at += MS
    r.add(at, MAIN, STREAM_SYNC, 2 * MS)
    at, n = 3 * S, 0
    while at < 76 * S:
        r.add(at, MAIN, MEMCPY_ASYNC, 30 * US)
        for k in range(4):
            n += 1
            r.add(at + 100 * US + k * 60 * US, MAIN, LAUNCH, 8 * US, sampled=n % 10 == 0)
        r.add(at + 400 * US, MAIN, STREAM_SYNC, 60 * US)
        if at > 10 * S:
            for k in range(bursts_between):
                r.add(at + 3 * S + k * 50 * US, MAIN, LAUNCH, 8 * US)
        at += rng.randint(6200, 6600) * MS
    for i in range(871):
        r.switch(200 * MS + i * 88 * MS, 49 * US, MAIN)
    for w in WORKERS:
        r.add(38 * S + (w - WORKERS[0]) * MS, MAIN, FORK, arg1=w)
        back = 38 * S + 10 * MS
        while back < 76 * S:
            off = rng.randint(1000, 5000) * US
            back += off + rng.randint(10, 40) * MS
            r.switch(back, off, w, by=rng.choice(WORKERS))
    return r


def _explain(tmp_path: Path, ref: Reference, name: str, *, aggregates: bool = True) -> Report:
    src = ref.write(tmp_path / f"{name}.db", aggregates=aggregates)
    ours = tmp_path / f"{name}-ours.db"
    import_file(src, ours)
    return explain_db(ours, ExplainOptions())


def _starvation(report: Report) -> Finding:
    (found,) = [f for f in report.findings if f.kind == "data-starvation"]
    return found


def test_a_dataloader_run_starved_by_its_host_is_data_starvation_from_selective_rows_and_counts(
    tmp_path: Path,
) -> None:
    # when the reference's file is imported and explained
    report = _explain(tmp_path, _dataloader(), "dataloader")
    # then the GPU starved by the process's own host side is the top finding, not a LOW cold start
    f = report.findings[0]
    assert f.kind == "data-starvation", [x.kind for x in report.findings]
    assert f.severity >= Severity.HIGH and f.symptom.pid == MAIN
    assert "while its feeding thread computes on the CPU" in f.symptom.summary
    cause = f.causes[0]
    assert cause.metrics["gaps"] == 12 and cause.metrics["on_cpu_measured"] == 1
    assert "on-CPU 99.9% of the gaps" in cause.evidence[1] and "871 times over the window" in cause.evidence[1]
    # and it says what the gaps rest on: two stored whole, the rest bounded by the batch shape and checked
    assert cause.metrics["inferred_gaps"] == 10 and cause.metrics["unchecked_gaps"] == 0
    assert "(at most 5 calls, issued within 400.0 µs before their sync)" in cause.evidence[2]
    assert "10 checked against its per-5 s counts" in cause.evidence[2]


def test_its_worker_processes_are_named_as_its_own_never_as_another_process(tmp_path: Path) -> None:
    report = _explain(tmp_path, _dataloader(), "workers")
    kinds = [f.kind for f in report.findings]
    assert "cpu-preemption" not in kinds and "noisy-neighbour" not in kinds
    f = _starvation(report)
    (own,) = [c for c in f.causes if c.kind == "own-workers"]
    assert own.metrics["workers"] == 8 and own.metrics["worker_switches"] > 10_000
    line = own.evidence[0]
    assert line.startswith("its own 8 worker processes (forked children, pids 4101–4108) went off the CPU")
    assert "not another process" in line
    assert "num_workers below the free cores" in f.fix and "torch.set_num_threads(1)" in f.fix


def test_without_the_files_counts_the_same_rows_give_starvation_resting_on_an_unchecked_shape(tmp_path: Path) -> None:
    # given the same rows, and no aggregates in the file
    report = _explain(tmp_path, _dataloader(), "rows-only", aggregates=False)
    f = _starvation(report)
    # then the gaps after the store-all window rest on a shape nothing in the file can check: HIGH, not CRITICAL
    assert f.severity == Severity.HIGH
    assert f.causes[0].metrics["unchecked_gaps"] == 10
    assert "the file kept no counts to check that shape" in f.causes[0].evidence[2]
    assert any(c.kind == "own-workers" for c in f.causes)


def test_counts_that_show_unstored_calls_inside_the_gaps_leave_those_gaps_out(tmp_path: Path) -> None:
    # given 200 launches 3 s after each later batch, none of them stored: the gaps between stored rows are not idle
    ref = _dataloader(bursts_between=200)
    # then the file's counts show them, and no idle time is claimed where they fall
    assert "data-starvation" not in [f.kind for f in _explain(tmp_path, ref, "bursts").findings]
    # while the same rows without the counts cannot show them: the finding then rests on the unchecked shape
    f = _starvation(_explain(tmp_path, ref, "bursts-rows-only", aggregates=False))
    assert f.severity == Severity.HIGH and f.causes[0].metrics["unchecked_gaps"] == 10


def _light_program() -> Reference:
    """A CPU-bound program (its thread on-CPU, switched every 100 ms) that uses the GPU now and then."""
    pid = 5200
    r = Reference(48.0, names={pid: "blender"})
    r.add(300 * MS, pid, MEM_ALLOC, 50 * US)
    at = S
    for gap in IRREGULAR_S:
        r.add(at, pid, LAUNCH, 10 * US)
        r.add(at + 50 * US, pid, STREAM_SYNC, 40 * US)
        at += int(gap * S)
    for i in range(470):
        r.switch(100 * MS * (i + 1), 50 * US, pid)
    return r


def test_a_program_that_uses_the_gpu_now_and_then_is_not_starvation(tmp_path: Path) -> None:
    assert "data-starvation" not in [f.kind for f in _explain(tmp_path, _light_program(), "light").findings]


def test_a_server_idle_off_cpu_between_requests_is_not_starvation(tmp_path: Path) -> None:
    # given an inference server: each request copies, launches and waits 3 ms on the GPU; between requests its
    # thread sleeps off-CPU (in epoll) until the next one arrives, at irregular times
    pid = 5300
    r = Reference(45.0, names={pid: "python3"})
    at = S
    for gap in IRREGULAR_S:
        r.add(at, pid, MEMCPY, 80 * US)
        for k in range(3):
            r.add(at + 100 * US + k * 20 * US, pid, LAUNCH, 8 * US)
        r.add(at + 200 * US, pid, STREAM_SYNC, 3 * MS)
        at += int(gap * S)
        r.switch(at - 500 * US, int(gap * S) - 4 * MS, pid)
    assert "data-starvation" not in [f.kind for f in _explain(tmp_path, r, "server").findings]


def test_gaps_spent_waiting_for_its_own_reads_are_blocking_io_not_starvation(tmp_path: Path) -> None:
    # given a loop that reads each batch synchronously (400 ms off-CPU in a block read), then feeds the GPU
    pid = 5400
    r = Reference(18.0, names={pid: "python3"})
    at = 200 * MS
    for _ in range(40):
        r.add(at, pid, BLOCK_READ, 400 * MS)
        r.switch(at + 400 * MS + 50 * US, 400 * MS, pid)
        at += 401 * MS
        r.add(at, pid, MEMCPY, 200 * US)
        for k in range(3):
            r.add(at + 300 * US + k * 20 * US, pid, LAUNCH, 8 * US)
        r.add(at + 400 * US, pid, STREAM_SYNC, 2 * MS)
        at += 3 * MS
    kinds = [f.kind for f in _explain(tmp_path, r, "reads").findings]
    assert kinds[0] == "blocking-io", kinds
    assert "data-starvation" not in kinds


# The reference records no task state: its off-CPU rows cannot tell preemption from waiting, so preemption
# is only ever reported from gpuscope's own rows. These two are recorded the way gpuscope records them.


def test_a_loop_preempted_by_an_outside_cpu_hog_is_cpu_preemption_not_starvation() -> None:
    # given a loop (2 ms of GPU work a step) whose thread a hog of another process holds in most of each gap
    ev = Events(comms={100: "train", 999: "stress"})
    for i in range(200):
        t = i * 10 * MS
        ev.add(Op.cudaLaunchKernel, t, 5 * US)
        wait = 6 * MS if i % 2 else 2 * MS
        ev.add(Op.cudaStreamSynchronize, t + 10 * US, wait)
        if i % 2:
            ev.sched(t + 500 * US, 4 * MS, preempted=True, by_pid=999)
        end = t + 10 * US + wait
        ev.sched(end + 200 * US, t + 10 * MS - end - MS, preempted=True, by_pid=999)
    kinds = ev.kinds()
    assert kinds[0] == "cpu-preemption", kinds
    assert "data-starvation" not in kinds
    (f,) = [f for f in ev.report().findings if f.kind == "cpu-preemption"]
    assert "move `stress` (pid 999) to other cores" in f.fix


def test_its_own_forked_worker_preempting_the_feeding_thread_is_named_as_its_own_worker() -> None:
    # given a loop whose syncs are slowed by its own DataLoader worker (forked child 300), in a cgroup of its own
    ev = Events(comms={100: "train", 300: "pt_data_worker"})
    ev.add(Op.process_fork, 0, 0, handle=300)
    syncs = steady_training(ev, 400)
    slow_syncs(ev, syncs, 4, 5 * MS, preempted=True, by_pid=300, by_cgroup=8)
    findings = ev.report().findings
    (f,) = [f for f in findings if f.kind == "cpu-preemption"]
    assert "100% of it by its own worker (a forked child: the DataLoader's num_workers), not another process" in (
        f.symptom.summary
    )
    assert "its own worker process (a forked child) pt_data_worker (pid 300" in f.causes[0].evidence[0]
    assert f.fix.startswith("keep DataLoader num_workers below the free cores") and "move `" not in f.fix
    # and a child is never a noisy neighbour, whatever its cgroup
    assert "noisy-neighbour" not in [x.kind for x in findings]
