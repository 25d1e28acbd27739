"""What to do about dropped events: advice measured to help, given how the recording was made.

Events are dropped when the kernel's ring is full: the agent reads it more
slowly than the probes fill it. Measured on a 2-CPU machine with two threads
making 2 million cudaLaunchKernel calls as fast as they can
(``gpuscope trace --no-tui [OPTION] -- cuda_hammer 1000000 2``, two runs each):

    option              dropped
    (defaults, 32m)     64-67 %
    --ring-size 128m    16-19 %
    --entry-only        65-69 %
    --record-all        56-61 %
    --no-host           58-61 %
    --no-wakeups        58-60 %

A larger ring is the one option that helps: it absorbs the burst while the
agent catches up. ``--entry-only`` does not (records are as many, and the
agent's work per record is the same), nor does selective storage or fewer
host events. Under *sustained* overload the limit is the agent's CPU: fewer
traced processes, or a CPU of its own, are what is left.
"""

from __future__ import annotations

from collections.abc import Mapping

# The tracer's drop counters (``sessions.drops``) and the source each costs, as ``drop_log.source`` names it.
DROP_SOURCES = {
    "drop_cuda": "cuda",
    "drop_driver": "driver",
    "drop_nccl": "nccl",
    "drop_host": "host",
    "drop_stack": "stack",
    "drop_aux": "exec",
    "drop_cpu_sample": "cpu_sample",
}

DEFAULT_RING_BYTES = 32 << 20
LARGE_RING_BYTES = 128 << 20


def drop_advice(flags: Mapping[str, object]) -> str:
    """The fix line for a recording that dropped events, given its session flags."""
    steps: list[str] = []
    ring = flags.get("ring_bytes")
    if not isinstance(ring, int) or ring < LARGE_RING_BYTES:
        size = max(4 * ring if isinstance(ring, int) else LARGE_RING_BYTES, LARGE_RING_BYTES)
        steps.append(f"a larger ring absorbs bursts: --ring-size {size >> 20}m")
    steps.append("if the overload is sustained, trace fewer processes (--pid) and leave gpuscope a CPU of its own")
    return "; ".join(steps)
