"""What to do about dropped events: advice that depends on how the recording was made.

Events are dropped when the kernel's ring is full: the agent reads it more
slowly than the probes fill it, because the writer is behind (SQLite is the
slowest stage) or because the burst is larger than the ring. The advice below
is ordered by what measurably reduces drops (see bench/drops_bench.py).
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_RING_BYTES = 32 << 20


def drop_advice(flags: Mapping[str, object]) -> str:
    """The fix line for a recording that dropped events, given its session flags."""
    steps: list[str] = []
    if flags.get("storage") == "all":
        steps.append("drop --record-all (selective storage writes a fraction of the rows)")
    ring = flags.get("ring_bytes")
    if isinstance(ring, int) and ring < 4 * DEFAULT_RING_BYTES:
        steps.append(f"a larger ring: --ring-size {max(ring * 4, DEFAULT_RING_BYTES) >> 20}m")
    if flags.get("stacks") not in (None, "off"):
        steps.append("--stacks off")
    if not steps:
        steps.append("trace fewer processes (--pid) or libraries (--lib)")
    return "; ".join(steps)
