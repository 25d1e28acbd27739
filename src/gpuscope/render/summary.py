"""The end-of-run summary of `gpuscope trace`: one screen, per op."""

from __future__ import annotations

from collections.abc import Mapping

from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op, Source, op_name, source_of
from gpuscope.model.units import fmt_count, fmt_ns

_TITLES = {Source.CUDA: "CUDA Runtime", Source.DRIVER: "CUDA Driver", Source.NCCL: "NCCL", Source.HOST: "Host"}
# Host ops whose duration is a time something took. The others are instants (a wakeup, an exit) or, for page
# allocations, counts aggregated over an interval: their "duration" is the interval, not a latency.
_TIMED_HOST = frozenset({int(Op.sched_switch), int(Op.block_io), int(Op.direct_reclaim)})
_UNTIMED = f"{'—':>11}" * 4


def render_summary(
    per_op: Mapping[int, LatencyHistogram],
    *,
    elapsed_s: float,
    counters: Mapping[str, int],
    preempted: int = 0,
    others: Mapping[int, int] | None = None,
    other_comms: Mapping[int, Mapping[str, int]] | None = None,
    stacks_unattributed: int = 0,
) -> str:
    """The summary; ``per_op`` counts the traced processes' own events, ``others`` the machine's (see LiveStats).

    ``stacks_unattributed``: stored calls left without a stack (their site's full stack was lost).
    """
    lines: list[str] = []
    total = sum(h.count for h in per_op.values())
    theirs = sum((others or {}).values())
    dropped = counters.get("dropped", 0)
    lines.append(
        f"{fmt_count(total)} events in {elapsed_s:.1f} s, {fmt_count(dropped)} dropped"
        + (f" ({dropped / max(total + theirs + dropped, 1):.2%})" if dropped else "")
        + (f"; {fmt_count(theirs)} more of other processes, kept as possible causes" if theirs else "")
    )
    for source in Source:
        ops = sorted((o for o in per_op if source_of(o) is source), key=lambda o: -per_op[o].total_ns)
        if not ops:
            continue
        lines.append("")
        lines.append(f"{_TITLES[source]:<24}{'count':>10}{'p50':>11}{'p95':>11}{'p99':>11}{'max':>11}")
        for op in ops:
            h = per_op[op]
            name = op_name(op)
            if source is Source.HOST and op not in _TIMED_HOST:
                lines.append(f"  {name:<22}{fmt_count(h.count):>10}{_UNTIMED}")
                continue
            lines.append(
                f"  {name:<22}{fmt_count(h.count):>10}{fmt_ns(h.percentile(50)):>11}"
                f"{fmt_ns(h.percentile(95)):>11}{fmt_ns(h.percentile(99)):>11}{fmt_ns(h.max_ns):>11}"
            )
    if preempted:
        lines.append(f"  ({fmt_count(preempted)} of the off-CPU intervals were preemptions)")
    if theirs:
        lines.append("")
        lines.append(
            "Other processes (machine-wide host events, not counted above; in the recording as possible causes)"
        )
        for op, n in sorted((others or {}).items(), key=lambda kv: -kv[1]):
            names = sorted((other_comms or {}).get(op, {}).items(), key=lambda kv: (-kv[1], kv[0]))
            who = ", ".join(f"{name} {fmt_count(k)}" for name, k in names[:3])
            more = f", {len(names) - 3} more" if len(names) > 3 else ""
            lines.append(f"  {op_name(op):<22}{fmt_count(n):>10}  {who}{more}")
    lost_stacks, lost_samples = counters.get("drop_stack", 0), counters.get("drop_cpu_sample", 0)
    if lost_stacks or lost_samples or stacks_unattributed:
        # Events are never held back for stacks: when the agent falls behind on the stack ring, stacks are what
        # is lost, counted here as in the recording (sessions.drops).
        lines.append("")
        lines.append(
            f"call stacks: {fmt_count(lost_stacks)} lost at a full stack ring, {fmt_count(stacks_unattributed)} "
            f"stored calls without one; {fmt_count(lost_samples)} on-CPU samples lost "
            "(fewer full stacks: --stack-every OP=N; fewer samples: --cpu-samples HZ)"
        )
    if counters.get("call_depth") or counters.get("unmatched_ret"):
        lines.append("")
        lines.append(
            f"untimed calls: {counters.get('call_depth', 0)} nested too deep, "
            f"{counters.get('unmatched_ret', 0)} returns without an entry"
        )
    return "\n".join(lines)
