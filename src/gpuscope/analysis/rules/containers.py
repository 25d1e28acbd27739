"""``noisy-neighbour`` per container: the preemption from another cgroup, named by its container.

The detection is ``NoisyNeighbourRule``'s (below); the rule registered adds the tenancy:
the preemptors' cgroups are grouped by container (docker, containerd, CRI-O,
podman, pod, Slurm job; the ``containers`` view), the neighbour container
that took most of the CPU is named in the summary, and the victim's own
container is given beside it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuscope.analysis.attribution import Attribution, Container
from gpuscope.analysis.context import Context
from gpuscope.analysis.preemption import preemptors
from gpuscope.analysis.rules.base import host_cause_findings
from gpuscope.analysis.workers import family
from gpuscope.model.findings import Finding, Severity
from gpuscope.model.units import fmt_ns


def _label(att: Attribution, cgroup_id: int) -> tuple[str, Container | None]:
    c = att.container(cgroup_id)
    return (c.label(), c) if c is not None else (f"cgroup {cgroup_id}", None)


class NoisyNeighbourRule:
    """Preemption by tasks of another cgroup (another container or job on the node)."""

    id = "noisy-neighbour"
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, s = ctx.frame, ctx.preempting
        s = s[(f.stream[s] != f.cgroup[s]) & (f.stream[s] > 1)]
        # A process's own forked children (its DataLoader workers) are its configuration, never a neighbour.
        for pid in ctx.forks:
            mine = f.pid[s] == pid
            if mine.any():
                fam = np.fromiter(family(ctx, pid), dtype=np.int64)
                s = s[~(mine & np.isin(f.handle[s] >> 32, fam))]
        if len(s) == 0:
            return []
        # Every preemption from another cgroup (a subset of ctx.preempting): the overlap cpu-preemption computed.
        cause = ctx.preempted_ns if len(s) == len(ctx.preempting) else ctx.own_thread_overlap(s)
        affected = ctx.affected(cause)
        evidence, culprits = {}, {}
        for pid in ctx.call_pids:
            evidence[pid], culprits[pid] = preemptors(ctx, pid, other_cgroup_only=True)
        fix = (
            "isolate the GPU job: give its cgroup an exclusive cpuset (cpuset.cpus, cpuset.cpus.partition=root) "
            "or raise its cpu.weight over the neighbour's"
        )
        out = host_cause_findings(
            ctx, self.id, "preemption from another cgroup", cause, affected, evidence, culprits, fix
        )
        # The mechanism is CPU preemption (reported by cpu-preemption); this names the tenancy: one level lower.
        return [_demote(x) for x in out]


def _demote(x: Finding) -> Finding:
    """One severity level lower, never below LOW."""
    return replace(x, severity=Severity(max(Severity.LOW, x.severity - 1)))


class ContainerNoisyNeighbourRule:
    """Preemption by another container's tasks, by container (wraps the per-cgroup detection)."""

    id = "noisy-neighbour"
    host_side = True

    def __init__(self, inner: NoisyNeighbourRule | None = None) -> None:
        self.inner = inner or NoisyNeighbourRule()

    def evaluate(self, ctx: Context) -> list[Finding]:
        found = self.inner.evaluate(ctx)
        if not found:
            return found
        att = ctx.window_attribution
        return [self._named(ctx, att, x) for x in found]

    def _named(self, ctx: Context, att: Attribution, x: Finding) -> Finding:
        by_cgroup: dict[int, int] = {}
        comms: dict[int, list[str]] = {}
        for cause in x.causes:
            for c in cause.culprits:
                if c.role == "preemptor" and c.cgroup_id:
                    by_cgroup[c.cgroup_id] = by_cgroup.get(c.cgroup_id, 0) + (c.time_ns or 0)
                    comms.setdefault(c.cgroup_id, []).append(c.label())
        if not by_cgroup:
            return x
        # Several cgroups can belong to one container (a pod's containers, nested slices).
        by_name: dict[str, int] = {}
        info: dict[str, Container | None] = {}
        for cg, t in by_cgroup.items():
            name, cont = _label(att, cg)
            by_name[name] = by_name.get(name, 0) + t
            info.setdefault(name, cont)
        total = sum(by_name.values()) or 1
        ranked = sorted(by_name.items(), key=lambda kv: -kv[1])
        top, top_ns = ranked[0]
        pid = x.symptom.pid
        own_cg = ctx.frame.cgroups.get(int(pid)) if pid is not None else None
        own = _label(att, own_cg)[0] if own_cg else None
        lines = tuple(
            f"neighbour {name}: {fmt_ns(t)} of preemption ({t / total:.0%})"
            + (f", tasks {', '.join(comms[cg][:2])}" if (cg := _cgroup_of(by_cgroup, att, name)) in comms else "")
            for name, t in ranked[:3]
        )
        victim = f"; the process runs in {own}" if own else ""
        causes = tuple(replace(c, evidence=(*lines, *c.evidence)) if i == 0 else c for i, c in enumerate(x.causes))
        extra = dict(x.symptom.extra)
        extra["neighbour"] = top
        top_info = info.get(top)
        if top_info is not None and top_info.container_id:
            extra["neighbour_container_id"] = top_info.container_id
        if own:
            extra["container"] = own
        summary = f"{x.symptom.summary}; the neighbour is {top} ({top_ns / total:.0%} of it){victim}"
        fix = f"{x.fix}; or move {top} to other cores / another node"
        return replace(x, symptom=replace(x.symptom, summary=summary, extra=extra), causes=causes, fix=fix)


def _cgroup_of(by_cgroup: dict[int, int], att: Attribution, name: str) -> int:
    for cg in by_cgroup:
        if _label(att, cg)[0] == name:
            return cg
    return 0


__all__ = ["ContainerNoisyNeighbourRule", "NoisyNeighbourRule"]
