"""The six built-in demo scenarios, registered like any other.

Each has a live part (real processes on the stand-in CUDA library, real CPU
hogs, real scheduler events) and a synthetic part (the same story generated
as events, no root needed). Numbers follow the reference's scenarios; see
docs/demo.md for what each shows.
"""

from __future__ import annotations

import numpy as np

from gpuscope.demo.live import LiveRun
from gpuscope.demo.scenario import Scenario, register
from gpuscope.demo.synthetic import Process, SyntheticRecording, Thread
from gpuscope.model.ops import Op
from gpuscope.stacks.frames import Frame

STREAM = 0x5151
KERNEL_BASE = 0x55D0_4A21_1000  # addresses of the kernels' host stubs
H2D, D2H = 1, 2
US, MS = 1_000, 1_000_000


def _j(rng: np.random.Generator, mean: float, spread: float) -> int:
    """``mean`` ± ``spread`` (a fraction), uniformly."""
    return max(int(mean * (1 + spread * rng.uniform(-1, 1))), 1)


def _n(n: int, scale: float, minimum: int) -> int:
    return max(int(n * scale), minimum)


def _launch(t: Thread, rng: np.random.Generator, k: int = 0, mean_ns: float = 14 * US) -> None:
    t.call(
        Op.cudaLaunchKernel,
        _j(rng, mean_ns, 0.2),
        handle=KERNEL_BASE + 0x40 * k,
        stream=STREAM,
        arg0=64 | 1 << 32 | 1 << 48,
        arg1=128 | 1 << 32 | 1 << 48,
    )


def _preempt_within(
    t: Thread, rng: np.random.Generator, start: int, dur: int, off_ns: int, by: list[Process], slice_ns: int = 2_100_000
) -> None:
    """Spread ``off_ns`` of preemption by ``by`` over the call [start, start + dur)."""
    k = max(1, round(off_ns / slice_ns))
    w = rng.uniform(0.7, 1.3, k)
    offs = (w / w.sum() * off_ns).astype(np.int64)
    gap = (dur - int(offs.sum())) // (k + 1)
    pos = start + gap
    for i, d in enumerate(offs.tolist()):
        t.preempted(pos, d, by[i % len(by)])
        pos += d + gap


def _page_allocs(p: Process, t: Thread, start: int, end: int, rng: np.random.Generator) -> None:
    """Per-second page-allocation aggregates, like the tracer's (arg0 = pages, bytes)."""
    for s in range(start, end, 1_000_000_000):
        pages = int(rng.integers(200, 2000))
        t.host(Op.mm_page_alloc, s, min(1_000_000_000, end - s), nbytes=pages * 4096, arg0=pages)


def _step(
    t: Thread, rng: np.random.Generator, sync_ns: int, copy_ns: int, launch_ns: float = 14 * US
) -> tuple[int, int]:
    """One training step: launch, copy a batch in, launch, synchronize. Returns the sync's (start, duration)."""
    _launch(t, rng, 0, launch_ns)
    t.call(Op.cudaMemcpy, copy_ns, nbytes=8 << 20, handle=0x7F00_0000_0000, arg0=H2D)
    _launch(t, rng, 1, launch_ns)
    start = t.call(Op.cudaStreamSynchronize, sync_ns, stream=STREAM)
    t.idle(_j(rng, 120 * US, 0.3))  # optimizer bookkeeping on the CPU
    return start, sync_ns


# -- incident --------------------------------------------------------------------------------------------


def incident_synthetic(rec: SyntheticRecording, scale: float) -> None:
    rng = np.random.default_rng(8)
    p = rec.process(4242, "python3", "python3 train.py --model resnet50 --batch-size 64")
    storm = [rec.process(pid, "cpu_hog", "cpu_hog", traced=False) for pid in (8821, 8822, 8823)]
    t = p.threads[0]
    start = t.now_ns
    for phase, n in (("baseline", _n(100, scale, 40)), ("storm", _n(50, scale, 20)), ("recovery", _n(50, scale, 20))):
        for i in range(n):
            if phase == "storm":
                # 7 CPU hogs share the trainer's core: every call gets ~1/8 of the CPU.
                _launch(t, rng, 0, 45 * US)
                c = t.call(Op.cudaMemcpy, _j(rng, 3 * MS, 0.2), nbytes=8 << 20, handle=0x7F00_0000_0000, arg0=H2D)
                _preempt_within(t, rng, c, t.now_ns - c, (t.now_ns - c) * 3 // 4, storm)
                _launch(t, rng, 1, 45 * US)
                d = _j(rng, 142 * MS, 0.2)
                s = t.call(Op.cudaStreamSynchronize, d, stream=STREAM)
                _preempt_within(t, rng, s, d, d - _j(rng, 16 * MS, 0.1), storm)
                t.idle(_j(rng, 400 * US, 0.3))
            else:
                sync = _j(rng, 16 * MS if phase == "baseline" else 17 * MS, 0.1)
                _step(t, rng, sync, _j(rng, 800 * US, 0.15))
            if phase == "baseline" and i < 10:
                # the caching allocator fills up in the first steps and keeps its blocks (not a leak)
                t.call(Op.cudaMalloc, _j(rng, 120 * US, 0.2), nbytes=64 << 20, handle=0x7F10_0000_0000 + i)
    _page_allocs(p, t, start, t.now_ns, rng)


def incident_live(run: LiveRun, scale: float) -> None:
    total_ms = int(11_000 * scale)
    trainer = run.workload(
        "steady",
        total_ms,
        latency={"cudaStreamSynchronize": "2ms", "cudaMemcpy": "300us", "cudaLaunchKernel": "20us"},
        cpu=0,
    )
    run.wait(total_ms * 0.27 / 1000, "baseline: training alone")
    with run.hogs(7, cpu=0):
        run.wait(total_ms * 0.45 / 1000, "CPU storm: 7 hogs on the trainer's core")
    run.join([trainer], "recovery")


# -- cold-start ------------------------------------------------------------------------------------------


def cold_start_synthetic(rec: SyntheticRecording, scale: float) -> None:
    rng = np.random.default_rng(1)
    p = rec.process(5150, "python3", "python3 serve.py --warmup 0")
    t = p.threads[0]
    t.call(Op.cudaMalloc, 12 * MS, nbytes=2 << 20, handle=0x7F20_0000_0000)  # context creation: ~150x
    for i in range(_n(150, scale, 60)):
        k = i % 8
        _launch(t, rng, k, 1.5 * MS if i < 8 else 15 * US)  # first launch of each kernel loads its module: ~100x
        t.call(Op.cudaMalloc, _j(rng, 80 * US, 0.2), nbytes=4096, handle=0x7F20_0001_0000 + i * 0x1000)
        t.call(Op.cudaMemcpy, _j(rng, 30 * US, 0.2), nbytes=4096, handle=0x7F20_0000_0000, arg0=H2D)
        t.call(Op.cudaStreamSynchronize, _j(rng, 400 * US, 0.1), stream=STREAM)
        t.call(Op.cudaFree, _j(rng, 20 * US, 0.2), handle=0x7F20_0001_0000 + i * 0x1000)
        t.idle(_j(rng, 40 * US, 0.3))


def cold_start_live(run: LiveRun, scale: float) -> None:
    w = run.workload("cold", _n(800, scale, 300), latency={"cudaStreamSynchronize": "100us"}, realtime=True)
    run.join([w], "first calls, then steady state")


# -- memcpy-bottleneck -------------------------------------------------------------------------------------


def memcpy_synthetic(rec: SyntheticRecording, scale: float) -> None:
    rng = np.random.default_rng(3)
    p = rec.process(6100, "python3", "python3 train.py --pin-memory false")
    t = p.threads[0]
    t.call(Op.cudaMalloc, 180 * US, nbytes=64 << 20, handle=0x7F30_0000_0000)
    for _ in range(_n(200, scale, 60)):
        # a 32 MiB pageable batch in, preprocessing, three kernels, 8 MiB of results out, wait
        t.call(Op.cudaMemcpy, _j(rng, 2.6 * MS, 0.3), nbytes=32 << 20, handle=0x7F30_0000_0000, arg0=H2D)
        t.idle(_j(rng, 1.5 * MS, 0.2))
        for k in range(3):
            _launch(t, rng, k)
        t.call(Op.cudaMemcpy, _j(rng, 0.9 * MS, 0.3), nbytes=8 << 20, handle=0x7F30_0000_0000, arg0=D2H)
        t.call(Op.cudaStreamSynchronize, _j(rng, 3 * MS, 0.1), stream=STREAM)


def memcpy_live(run: LiveRun, scale: float) -> None:
    # Under 1,000 copies: explain reads larger high-rate groups thinned to their slow calls (see docs/demo.md).
    w = run.workload(
        "memcpy",
        _n(480, scale, 300),
        latency={"cudaMemcpy": "650us", "cudaStreamSynchronize": "1ms", "cudaLaunchKernel": "20us"},
        realtime=True,
    )
    run.join([w], "copies in, compute, copies out")


# -- periodic-spike ----------------------------------------------------------------------------------------


def spikes_synthetic(rec: SyntheticRecording, scale: float) -> None:
    rng = np.random.default_rng(4)
    p = rec.process(7007, "python3", "python3 train.py --empty-cache-every 200")
    t = p.threads[0]
    for i in range(_n(1200, scale, 700)):
        spike = i % 200 == 100  # the caching allocator gave its blocks back: cudaMalloc goes to the driver
        t.call(
            Op.cudaMalloc,
            _j(rng, 5 * MS if spike else 100 * US, 0.1),
            nbytes=16 << 20,
            handle=0x7F40_0000_0000 + (i % 64) * (16 << 20),
        )
        _launch(t, rng, 0)
        _launch(t, rng, 1)
        t.call(Op.cudaStreamSynchronize, _j(rng, 300 * US, 0.15), stream=STREAM)
        t.call(Op.cudaFree, _j(rng, 8 * US, 0.2), handle=0x7F40_0000_0000 + (i % 64) * (16 << 20))
        t.idle(_j(rng, 30 * US, 0.3))


def spikes_live(run: LiveRun, scale: float) -> None:
    w = run.workload(
        "spikes",
        _n(1200, scale, 700),
        latency={"cudaStreamSynchronize": "300us", "cudaLaunchKernel": "20us"},
        realtime=True,
    )
    run.join([w], "allocating every step")


# -- cpu-contention ----------------------------------------------------------------------------------------


# -- dataloader-starvation -------------------------------------------------------------------------------


def _py(function: str, file: str, line: int) -> Frame:
    return Frame("python", function, file=file, line=line)


_TORCH = "/usr/lib/python3/dist-packages/torch/utils/data"
_LOOP = (_py("_next_data", f"{_TORCH}/dataloader.py", 675), _py("train", "/srv/train.py", 88))
_FETCH = _py("fetch", f"{_TORCH}/_utils/fetch.py", 51)
# Where a DataLoader with num_workers=0 spends the host's time: decoding samples one by one, then collating.
_LOADER_STACKS = [
    ((_py("Dataset.__getitem__", "/srv/data.py", 42), _py("<listcomp>", f"{_TORCH}/_utils/fetch.py", 51),
      _FETCH, *_LOOP), 0.71),
    ((_py("default_collate", f"{_TORCH}/_utils/collate.py", 265), _FETCH, *_LOOP), 0.22),
    ((_py("train", "/srv/train.py", 91),), 0.07),
]  # fmt: skip


def dataloader_synthetic(rec: SyntheticRecording, scale: float) -> None:
    rng = np.random.default_rng(6)
    p = rec.process(6262, "python3", "python3 train.py --num-workers 0 --batch-size 32")
    t = p.threads[0]
    for _ in range(_n(60, scale, 25)):
        # The batch is built on the feeding thread: the GPU has nothing queued meanwhile.
        t.compute(_j(rng, 180 * MS, 0.1), _LOADER_STACKS)
        for k in range(40):
            _launch(t, rng, k % 4)
        t.call(Op.cudaStreamSynchronize, _j(rng, 3 * MS, 0.1), stream=STREAM)


def dataloader_live(run: LiveRun, scale: float) -> None:
    w = run.python_workload("dataloader_loop.py", [str(_n(80, scale, 30))], latency={"cudaStreamSynchronize": "3ms"})
    run.join([w], "building batches in Python on the feeding thread", timeout_s=120)


def contention_synthetic(rec: SyntheticRecording, scale: float) -> None:
    rng = np.random.default_rng(5)
    p = rec.process(3141, "python3", "python3 train.py --num-workers 0")
    neighbour = [rec.process(3999, "cpu_hog", "cpu_hog 4000 12000", traced=False)]
    t = p.threads[0]
    start = t.now_ns
    for phase, n in (("before", _n(50, scale, 20)), ("contention", _n(150, scale, 60)), ("after", _n(50, scale, 20))):
        for _ in range(n):
            base = _j(rng, 600 * US, 0.4)
            if phase == "contention" and rng.uniform() < 0.6:
                off = _j(rng, 5 * MS, 0.5)  # the neighbour's burst holds the core
                s, d = _step(t, rng, base + off, _j(rng, 120 * US, 0.2))
                _preempt_within(t, rng, s, d, off, neighbour, slice_ns=off)
            else:
                _step(t, rng, base, _j(rng, 120 * US, 0.2))
    _page_allocs(p, t, start, t.now_ns, rng)


def contention_live(run: LiveRun, scale: float) -> None:
    total_ms = int(8000 * scale)
    trainer = run.workload(
        "steady",
        total_ms,
        # The neighbour's 8 ms bursts outlast a 2 ms synchronize, so a burst that lands in one stretches it (a
        # burst inside a longer wait would end before the GPU does and cost nothing): most bursts hit a call.
        latency={"cudaStreamSynchronize": "2ms", "cudaMemcpy": "300us", "cudaLaunchKernel": "15us"},
        cpu=0,
    )
    run.wait(total_ms * 0.2 / 1000, "training alone")
    with run.hogs(2, cpu=0, busy_us=8000, idle_us=8000):
        run.wait(total_ms * 0.6 / 1000, "two bursty neighbours share the core")
    run.join([trainer], "neighbours gone")


# -- gpu-steal ------------------------------------------------------------------------------------------------


def steal_synthetic(rec: SyntheticRecording, scale: float) -> None:
    """Three jobs time-slice one GPU: each step needs 3 ms of GPU time, shared equally among waiters."""
    rng = np.random.default_rng(6)
    span = int(6e9 * scale)
    jobs = [
        (rec.process(pid, comm, f"python3 {comm}.py", start_ns=rec.start_ns + offset), offset)
        for pid, comm, offset in ((9101, "job-a", 0), (9102, "job-b", span // 3), (9103, "job-c", span // 2))
    ]
    dt = 50 * US
    # per job: state ("cpu", until) or ("gpu", remaining work, sync start); discrete time steps
    state: list[list[int]] = []
    threads: list[Thread] = []
    for p, _offset in jobs:
        t = p.threads[0]
        threads.append(t)
        state.append([0, t.now_ns, 0])  # phase 0 = host, until ns; phase 1 = waiting, remaining, sync start
    now = rec.start_ns
    end = rec.start_ns + span
    while now < end:
        waiting = [i for i, s in enumerate(state) if s[0] == 1]
        for i, s in enumerate(state):
            t = threads[i]
            if s[0] == 0 and now >= s[1]:
                t.now_ns = now
                for k in range(4):
                    _launch(t, rng, k)
                state[i] = [1, _j(rng, 3 * MS, 0.2), t.now_ns]
            elif s[0] == 1 and i in waiting:
                s[1] -= dt // len(waiting)
                if s[1] <= 0:
                    t.now_ns = s[2]
                    t.call(Op.cudaStreamSynchronize, now + dt - s[2], stream=STREAM)
                    t.blocked(s[2] + 20 * US, now + dt - s[2] - 40 * US)
                    state[i] = [0, t.now_ns + _j(rng, 500 * US, 0.8), 0]
        now += dt
    for t in threads:
        t.now_ns = max(t.now_ns, end)


def steal_live(run: LiveRun, scale: float) -> None:
    total_ms = int(8000 * scale)
    shared = str(run.workdir / "gpu0")
    a = run.workload("contend", total_ms, shared, name="job-a", realtime=True)
    run.wait(total_ms * 0.33 / 1000, "job-a alone on the GPU")
    b = run.workload("contend", int(total_ms * 0.67), shared, name="job-b", realtime=True)
    run.wait(total_ms * 0.17 / 1000, "job-b joins")
    c = run.workload("contend", int(total_ms * 0.5), shared, name="job-c", realtime=True)
    run.join([a, b, c], "three jobs time-slice the GPU")


# -- the registry entries -----------------------------------------------------------------------------------

register(
    Scenario(
        "incident",
        "CPU storm → cudaStreamSynchronize 8× spike → root cause and fix",
        "A training loop runs at ~16 ms per step. Then CPU hogs land on its core: the synchronize that waits for "
        "the GPU now waits for the CPU, ~8× slower. explain connects the spike to the preemptions, names the "
        "processes that took the CPU and says how to isolate the trainer.",
        "cpu-preemption",
        incident_synthetic,
        incident_live,
        11.0,
        "incident.py",
    )
)
register(
    Scenario(
        "cold-start",
        "first calls 50–200× slower than steady state",
        "A fresh process pays for CUDA context creation on its first cudaMalloc and for lazy module loading on "
        "the first launch of each kernel: 50–200× the steady-state latency. explain separates this one-off warm-up "
        "from steady-state problems.",
        "cold-start",
        cold_start_synthetic,
        cold_start_live,
        1.0,
        "cold_start.py",
    )
)
register(
    Scenario(
        "memcpy-bottleneck",
        "copies take ~40% of wall time",
        "Each step copies a pageable batch to the GPU and the results back: host↔device copies take ~40% of the "
        "wall time, more than the kernels' synchronisations. explain reports the copy share, bytes, bandwidth and "
        "directions, and the fix (pinned memory, async copies, keep data on the GPU).",
        "memcpy-bound",
        memcpy_synthetic,
        memcpy_live,
        1.5,
        "memcpy.py",
    )
)
register(
    Scenario(
        "periodic-spike",
        "cudaMalloc spikes 50× every ~200 iterations",
        "Every ~200 steps the caching allocator has given its memory back, and cudaMalloc goes to the driver: 50× "
        "its usual latency, at a regular period. explain finds the spikes and their period and names the usual "
        "culprit (empty_cache in the loop, changing shapes).",
        "allocator-churn",
        spikes_synthetic,
        spikes_live,
        1.0,
        "periodic_spike.py",
    )
)
register(
    Scenario(
        "dataloader-starvation",
        "the GPU waits for batches built in Python",
        "A training loop loads its data with num_workers=0: each batch is decoded sample by sample in "
        "Dataset.__getitem__ and collated on the thread that feeds the GPU, which idles ~98% of the time. explain "
        "finds the idle gaps, reads the on-CPU samples taken in them, names the Python functions that hold the "
        "host with their share, and gives the fix for that code (batched __getitems__, DataLoader workers).",
        "data-starvation",
        dataloader_synthetic,
        dataloader_live,
        10.0,
        "dataloader.py",
        ("data-starvation", "dataloader"),
    )
)
register(
    Scenario(
        "cpu-contention",
        "host preemption → CUDA latency",
        "A bursty neighbour (think log compression) shares the trainer's core. Whenever it runs, the trainer's "
        "synchronize calls stretch by the time the neighbour held the CPU. explain measures the effect call by call "
        "and names the neighbour.",
        "cpu-preemption",
        contention_synthetic,
        contention_live,
        8.0,
        "cpu_contention.py",
    )
)
register(
    Scenario(
        "gpu-steal",
        "several processes time-slicing one GPU",
        "job-a runs alone, then job-b and job-c start on the same GPU. The GPU time-slices between them and "
        "job-a's waits grow 2–3×. explain attributes the slowdown to the other processes' GPU work and suggests "
        "separate GPUs, MPS or MIG.",
        "gpu-contention",
        steal_synthetic,
        steal_live,
        8.0,
        "gpu_steal.py",
        ("gpu-contention", "contention"),
    )
)
