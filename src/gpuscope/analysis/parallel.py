"""The rules of one window evaluated on two threads: the host side's beside the rest.

Measured on the bench's hard 10M-event file (bench/explain_bench.py, 2 CPUs):
the rules took 0.75 s on one thread and 0.47 s on two (one frame, warm, in
one process), for 25-50 MB more peak memory with one malloc arena (both
sides' temporaries are alive at once). The two sides share
little: the host rules the per-call overlaps with off-CPU time, the others
the calls grouped by process and op. What both ask for (the calls, their
starts and ends) is computed once, under the Context's locks.

The report does not depend on it: each rule's findings and notes are kept
apart and put together in rule order, as one thread gives them.
"""

from __future__ import annotations

import os

from gpuscope.analysis.context import Context
from gpuscope.analysis.rules import Rule
from gpuscope.analysis.side_thread import Background
from gpuscope.model.findings import Finding

# Below this many rows a second thread saves less than it costs to start (about 0.1 ms), and one thread
# keeps small analyses (tests, the dashboard's small windows) as simple to follow as they were.
PARALLEL_MIN_ROWS = 1 << 16


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def evaluate(rules: tuple[Rule, ...], ctx: Context, threads: int | None = None) -> list[Finding]:
    """Every rule's findings, in rule order; on two threads when ``threads`` is 2 or more.

    ``threads`` None: two for a frame of ``PARALLEL_MIN_ROWS`` rows or more
    where the process may use two CPUs, else one.
    """
    if threads is None:
        threads = 2 if len(ctx.frame) >= PARALLEL_MIN_ROWS and usable_cpus() > 1 else 1
    found: list[list[Finding]] = [[] for _ in rules]

    def run(which: list[int]) -> None:
        for i in which:
            found[i] = rules[i].evaluate(ctx)

    host = [i for i, r in enumerate(rules) if r.host_side]
    rest = [i for i, r in enumerate(rules) if not r.host_side]
    if threads < 2 or not host or not rest:
        run(list(range(len(rules))))
    else:
        side = Background(lambda: run(host), name="gpuscope-rules")
        try:
            run(rest)
        finally:
            side.finish()  # after an error here too: the side thread reads the same Context
    return [f for mine in found for f in mine]
