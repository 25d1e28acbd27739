"""What a trace records: the tracer's options, in a module light enough to import first.

`gpuscope trace` builds these before anything heavy is imported, and starts
loading the probes with them at once (see commands/trace.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# Python's GIL switch interval while a trace runs (the default is 5 ms). Two
# waits shrink with it: the writer thread's executemany lets go of the GIL at
# every row and then waits for the collector's Python work to give it back
# (measured: 656 rows/s against a busy Python thread, 240k at 1 ms, 650k at
# 0.2 ms); and at start-up the probes load on a thread making hundreds of short
# ctypes calls, each waiting to take the GIL back from the main thread's imports.
GIL_SWITCH_S = 0.0002


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """What to trace and how.

    filter_targets: only the given pids (and descendants); otherwise any
        process that calls a probed API becomes a target.
    entry_only: record calls at entry without durations (cheapest).
    """

    filter_targets: bool = True
    entry_only: bool = False
    host: bool = True
    wakeups: bool = True
    ring_bytes: int = 32 << 20
    force_classic_uprobes: bool = False
    io: bool = True
    tcp: bool = True
    memory: bool = True
    # 0 off, 1 native frames, 2 native + Python frames (see gpuscope.stacks.policy)
    stacks: int = 2
    stack_policy: tuple[tuple[int, int], ...] = ()
    # Report CUDA libraries that processes map after start (bpf/loads.bpf.c) ...
    late_loads: bool = True
    # ... and stop the process until their probes are attached.
    hold: bool = True
    # Probe the high-rate ops (gpuscope.model.policy.SAMPLED_PROBE_OPS) in windows under an overhead
    # budget (gpuscope.agent.sampling); False: every call of every op, always (--record-all, --budget off).
    sampled_probes: bool = False
    # On-CPU samples of traced threads per second of their CPU time (bpf/include/profile.bpf.h); 0: none.
    # Taken only with stacks on (they are stacks).
    cpu_sample_hz: int = 0
