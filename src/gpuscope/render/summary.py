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
) -> str:
    lines: list[str] = []
    total = sum(h.count for h in per_op.values())
    dropped = counters.get("dropped", 0)
    lines.append(
        f"{fmt_count(total)} events in {elapsed_s:.1f} s, {fmt_count(dropped)} dropped"
        + (f" ({dropped / max(total + dropped, 1):.2%})" if dropped else "")
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
    if counters.get("call_depth") or counters.get("unmatched_ret"):
        lines.append("")
        lines.append(
            f"untimed calls: {counters.get('call_depth', 0)} nested too deep, "
            f"{counters.get('unmatched_ret', 0)} returns without an entry"
        )
    return "\n".join(lines)
