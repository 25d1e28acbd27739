"""The notes a report carries: where the analysis could not measure something, or told it apart by inference.

Each takes the analysis ``Context`` and returns zero or one line for
``Report.notes``.
"""

from __future__ import annotations

from gpuscope.analysis.context import Context
from gpuscope.analysis.rules import Rule
from gpuscope.analysis.stats import MIN_AFFECTED


def rates_note(ctx: Context) -> tuple[str, ...]:
    """Say so when imported processes have no rates, instead of reading a drop off selectively stored rows."""
    imp = ctx.imported_rates
    if imp is None:
        return ()
    if imp.series:
        return (
            "the reference's processes: counts, totals and rates from its own exact counts; percentiles from the "
            "rows it stored, which it keeps selectively (they lean to slow calls)",
        )
    return (
        "rates unavailable for the imported processes: the reference stores rows selectively and this file kept "
        "no aggregates, so throughput over time is not analysed for them",
    )


def too_small_note(ctx: Context, rules: tuple[Rule, ...]) -> tuple[str, ...]:
    """Name the groups a cause touched too few times to measure (fewer than ``MIN_AFFECTED`` calls)."""
    groups = [g for rule in rules for g in ctx.too_small.get(rule.id, ())]
    if not groups:
        return ()
    return (f"too few calls to compare (fewer than {MIN_AFFECTED} affected), so no finding for: " + "; ".join(groups),)


def stateless_note(ctx: Context) -> tuple[str, ...]:
    """Say so when off-CPU time inside calls has no task state, instead of guessing a cause."""
    s = ctx.stateless_sched
    if len(s) == 0 or len(ctx.calls) == 0:
        return ()
    inside = ctx.own_thread_overlap(s)
    total = int(inside.sum())
    if total == 0:
        return ()
    kinds = ctx.stateless_kinds
    told = ", ".join(
        f"{len(kinds[k])} {what}"
        for k, what in (("io", "I/O waits"), ("timer", "timer sleeps"), ("idle", "idle waits"))
        if len(kinds[k])
    )
    return (
        f"{len(s)} off-CPU intervals carry no task state (imported recording?): {total / 1e6:.1f} ms of them fall "
        "inside CUDA calls. Told apart by inference: "
        f"{told or 'none'}; {len(kinds['unexplained'])} unexplained. Preemption cannot be told from voluntary "
        "blocking without the state, so none is reported as cpu-preemption",
    )
