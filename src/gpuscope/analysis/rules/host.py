"""Rules whose cause is on the host: CPU preemption, other cgroups, block I/O, memory, network, OOM."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.intervals import count_in, distinct, overlap_by_key
from gpuscope.analysis.preemption import preemptors
from gpuscope.analysis.rules.base import host_cause_findings
from gpuscope.analysis.workers import WORKER_FIX, family
from gpuscope.model.findings import Cause, Culprit, Finding, Severity, Symptom
from gpuscope.model.ops import Op
from gpuscope.model.units import fmt_bytes, fmt_ns

BURST_BYTES = 64 << 20
BURST_MAX_NS = 100_000_000


# The fix when a process's own threads take most of its CPU: more runnable threads than it has cores.
OWN_THREADS_FIX = (
    "its own threads outnumber the cores it has: run fewer (torch.set_num_threads, OMP_NUM_THREADS, fewer "
    "Python threads; where they run Python they also wait for the GIL, see gil-bound) or give it more cores"
)


def _with_own_workers(ctx: Context, x: Finding, culprits: tuple[Culprit, ...]) -> Finding:
    """The fix for a process's own preemptors: its threads and workers are its configuration, outsiders are moved."""
    pid = x.symptom.pid
    if pid is None:
        return x
    own = family(ctx, pid)
    outside = [c for c in culprits if c.pid not in own]
    workers = [c for c in culprits if c.pid in own and c.pid != pid]
    names = ", ".join(f"`{c.comm or c.pid}` (pid {c.pid})" for c in outside[:2])
    fix = x.fix + (f"; move {names} to other cores or lower its priority (nice -n 19, cpu.weight)" if names else "")
    share = sum(c.share or 0 for c in workers)
    threads = sum(c.share or 0 for c in culprits if c.pid == pid)
    if threads >= 0.5:
        summary = f"{x.symptom.summary}; {threads:.0%} of it by its own threads, not another process"
        return replace(x, symptom=replace(x.symptom, summary=summary), fix=f"{OWN_THREADS_FIX}; {fix}")
    if share < 0.5:
        return replace(x, fix=fix)
    who = (
        f"its own {len(workers)} worker processes (forked children"
        if len(workers) > 1
        else "its own worker (a forked child"
    )
    summary = f"{x.symptom.summary}; {share:.0%} of it by {who}: the DataLoader's num_workers), not another process"
    return replace(x, symptom=replace(x.symptom, summary=summary), fix=f"{WORKER_FIX}; {fix}")


class CpuPreemptionRule:
    """Calls slowed because their thread was runnable but another task had the CPU (voluntary sleeps excluded)."""

    id = "cpu-preemption"
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        cause = ctx.preempted_ns
        affected = ctx.affected(cause)
        evidence, culprits = {}, {}
        for pid in ctx.call_pids:
            evidence[pid], culprits[pid] = preemptors(ctx, pid)
        fix = "pin the GPU process to dedicated cores (taskset -c / cgroup cpuset) and keep other work off them"
        found = host_cause_findings(ctx, self.id, "CPU preemption", cause, affected, evidence, culprits, fix)
        return [_with_own_workers(ctx, x, culprits.get(x.symptom.pid or 0, ())) for x in found]


def _same_pid_interval_cause(ctx: Context, op: Op) -> tuple[np.ndarray, np.ndarray]:
    f, c = ctx.frame, ctx.calls
    i = np.flatnonzero(f.op == int(op))
    ends = f.ts[i] + np.maximum(f.dur[i], 1)
    return i, overlap_by_key(f.pid[c], ctx.call_start, ctx.call_end, f.pid[i], f.ts[i], ends)


class BlockIoRule:
    """Calls slowed while block I/O of the same process was in flight."""

    id = "block-io"
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        f = ctx.frame
        io, inflight = _same_pid_interval_cause(ctx, Op.block_io)
        if len(io) == 0:
            return []
        # Time the thread itself was blocked while I/O was in flight is what the I/O cost the call.
        cause = np.minimum(inflight, np.maximum(ctx.voluntary_ns, inflight // 2))
        affected = ctx.affected(inflight)
        evidence = {}
        for pid in ctx.call_pids:
            m = io[f.pid[io] == pid]
            if len(m):
                writes = int((f.arg0[m] == 1).sum())
                evidence[pid] = [
                    f"{len(m)} block I/O requests ({len(m) - writes} reads, {writes} writes), "
                    f"{fmt_bytes(float(f.bytes[m].sum()))}, peak latency {fmt_ns(float(f.dur[m].max()))}"
                ]
        fix = (
            "move checkpoint writes off the training thread (async checkpointing, torch.distributed.checkpoint "
            "async_save) and data reads to faster storage (NVMe, /dev/shm, page cache warm-up)"
        )
        return host_cause_findings(ctx, self.id, "block I/O", cause, affected, evidence, {}, fix)


class MemoryPressureRule:
    """Calls slowed by direct reclaim / page-allocation bursts of the same process."""

    id = "memory-pressure"
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        rec = np.flatnonzero(f.op == int(Op.direct_reclaim))
        pa = np.flatnonzero(f.op == int(Op.mm_page_alloc))
        # Page allocations are stored aggregated over an interval: only a short interval with many
        # bytes is a burst that can be placed in time; the rest is background.
        burst = pa[(f.bytes[pa] >= BURST_BYTES) & (f.dur[pa] <= BURST_MAX_NS)]
        src = np.concatenate([rec, burst])
        if len(src) == 0:
            return []
        src_end = f.ts[src] + np.maximum(f.dur[src], 1)
        cause = overlap_by_key(f.pid[c], ctx.call_start, ctx.call_end, f.pid[src], f.ts[src], src_end)
        affected = ctx.affected(cause)
        evidence = {}
        for pid in ctx.call_pids:
            r = rec[f.pid[rec] == pid]
            p = burst[f.pid[burst] == pid]
            evidence[pid] = [
                f"{len(r)} direct reclaims stalling {fmt_ns(float(f.dur[r].sum()))}; "
                f"{len(p)} page-allocation bursts ({fmt_bytes(float(f.bytes[p].sum()))})"
            ]
        fix = (
            "reduce host memory use (smaller prefetch queues, fewer DataLoader workers, pinned-memory pools) or "
            "give the job more RAM / a higher memory.min; check for swap with `vmstat 1`"
        )
        return host_cause_findings(ctx, self.id, "memory reclaim", cause, affected, evidence, {}, fix)


class TcpRetransmitRule:
    """Calls slowed while TCP segments of the same process were being retransmitted."""

    id = "tcp-retransmit"
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        f, c = ctx.frame, ctx.calls
        rt = np.flatnonzero(f.op == int(Op.tcp_retransmit))
        if len(rt) == 0:
            return []
        hits = np.zeros(len(c), dtype=np.int64)
        for pid in distinct(f.pid[rt]).tolist():
            cm = ctx.pid_calls(pid)
            pts = np.sort(f.ts[rt[f.pid[rt] == pid]])
            hits[cm] = count_in(ctx.call_start[cm], ctx.call_end[cm], pts)
        affected = hits > 0
        cause = np.where(affected, f.dur[c], 0)  # a retransmit timeout stalls the whole call
        evidence = {
            int(p): [f"{int((f.pid[rt] == p).sum())} TCP retransmits during its calls"]
            for p in distinct(f.pid[rt]).tolist()
        }
        fix = (
            "check the network path: NIC counters (ethtool -S), switch errors, MTU mismatches; for NCCL over TCP "
            "set NCCL_SOCKET_IFNAME to the fast interface"
        )
        return host_cause_findings(ctx, self.id, "TCP retransmits", cause, affected, evidence, {}, fix)


class OomRule:
    """A process was killed by the OOM killer."""

    id = "oom"
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        f = ctx.frame
        out = []
        traced = set(ctx.call_pids)
        for i in np.flatnonzero(f.op == int(Op.oom_kill)).tolist():
            victim = int(f.handle[i])
            sev = Severity.CRITICAL if victim in traced or not traced else Severity.HIGH
            comm = f.comm(victim)
            sym = Symptom(
                f"{comm or 'process'} (pid {victim}) was killed by the OOM killer (rss {fmt_bytes(float(f.bytes[i]))})",
                None,
                victim,
                comm,
                count=1,
                extra={"rss_bytes": int(f.bytes[i]), "ts_ns": int(f.ts[i])},
            )
            cause = Cause(
                self.id,
                (f"oom_kill of pid {victim} at +{fmt_ns(float(f.ts[i] - ctx.window.start_ns))}",),
                culprits=(Culprit("victim", victim, comm=comm, cgroup_id=int(f.cgroup[i]) or None),),
                metrics={"rss_bytes": int(f.bytes[i])},
            )
            span = ctx.pid_span_ns(victim)
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=sev,
                    symptom=sym,
                    causes=(cause,),
                    fix="lower host memory use (batch size, DataLoader workers, prefetch) or raise the memory "
                    "limit of the job's cgroup (memory.max) / add RAM",
                    lost_ns=span,
                    wall_ns=max(span, 1),
                )
            )
        return out


__all__ = [
    "BlockIoRule",
    "CpuPreemptionRule",
    "MemoryPressureRule",
    "OomRule",
    "TcpRetransmitRule",
]
