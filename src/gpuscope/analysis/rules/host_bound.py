"""Rules for a GPU held up by its own host, inside the step: launch overhead, the GIL, a sync every step.

``data-starvation`` (gpuscope.analysis.rules.flow) covers the long gaps after a
synchronisation. These cover the other host-bound shapes, each told apart by
what the feeding thread (the thread making the GPU calls) did:

- ``launch-bound``: it was on a CPU between launches, tens of microseconds
  each (Python between tiny kernels), and the syncs found the GPU done: the
  launches are the step.
- ``gil-bound``: it was off its CPU by its own choice, over and over for a few
  milliseconds (a thread waiting for the GIL gives up after the switch
  interval, 5 ms), woken by another thread of its process that was running
  Python meanwhile (its on-CPU samples say so).
- ``sync-in-loop``: every step waits for the GPU (``.item()``, ``.cpu()``) and
  then computes on the host while the GPU has nothing queued: host and GPU take
  turns instead of overlapping. A GPU busy most of the time is ``sync-stall``;
  a host that holds the GPU idle most of the time is ``data-starvation``.
"""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.cpu_profile import describe_hot, host_time_cause
from gpuscope.analysis.frame import LAUNCH_OPS, SYNC_OPS
from gpuscope.analysis.gil import gil_waits
from gpuscope.analysis.intervals import distinct, intersect_all, overlap_ns
from gpuscope.analysis.rules.base import spread_symptom
from gpuscope.analysis.stats import severity_for
from gpuscope.analysis.steps import MIN_STEPS, sync_turns
from gpuscope.model.findings import Cause, Finding, Severity
from gpuscope.model.op_table import in_ops
from gpuscope.model.ops import Op
from gpuscope.model.units import fmt_ns

# launch-bound: at least this many launches, this many a step, this much host time per launch (Python
# between tiny kernels; a C loop calling back to back spends ~1 µs), this share of the time launching.
LAUNCH_MIN = 1000
LAUNCH_GAP_NS = 5_000
LAUNCH_PER_STEP = 20
LAUNCH_SHARE = 0.4
# A sync that finds the GPU done returns in well under the host time of one launch.
QUICK_SYNC_NS = 200_000


def _feeders(ctx: Context, pid: int) -> tuple[np.ndarray, set[int]]:
    """The process's GPU calls (``Context.outer_work_rows``) and the threads that make them."""
    rows = ctx.outer_work_rows(pid)
    return rows, set(distinct(ctx.frame.tid[rows]).tolist())


def _host_idle(ctx: Context, pid: int, tids: set[int], starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per interval: the time none of the threads ``tids`` was on a CPU (each off it, for any reason).

    A step's work moves between threads (PyTorch runs backward on its autograd thread while the main thread
    waits for it): the host is busy while any of them runs.
    """
    f, s = ctx.frame, ctx.sched
    s = s[f.pid[s] == pid]
    groups = []
    for t in sorted(tids):
        mine = s[f.tid[s] == t]
        if not len(mine):
            return np.zeros(len(starts), dtype=np.int64)  # a thread never off its CPU: the host never idle
        groups.append((f.ts[mine], f.ts[mine] + f.dur[mine]))
    os_, oe = intersect_all(groups)
    return overlap_ns(starts, ends, os_, oe)


class LaunchBoundRule:
    """Thousands of tiny kernels with host code between them: the GPU waits for each launch.

    Read per step (a synchronisation to the next): its launch phase runs from the first GPU call after the
    synchronisation (a row always kept, in every storage mode) to the next synchronisation, and holds the
    step's share of the process's launches (exact counts from the aggregates, estimated under the overhead
    budget). Host time per launch is the phase's length over its launches; the time before the phase is
    ``data-starvation``'s.
    """

    id = "launch-bound"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f = ctx.frame
        out = []
        for p in ctx.call_pids:
            rows, feeders = _feeders(ctx, p)
            is_sync = in_ops(f.op[rows], SYNC_OPS)
            after = np.flatnonzero(is_sync[:-1])
            launches = self._launches(ctx, p, rows)
            if len(after) < MIN_STEPS or launches < LAUNCH_MIN:
                continue
            sync_rows = rows[is_sync]
            if float(np.median(f.dur[sync_rows])) > QUICK_SYNC_NS:
                continue  # the GPU still had work when the host waited: it kept up with the launches
            # Each step's launch phase: the first call after a sync to the next sync.
            nxt = np.searchsorted(np.flatnonzero(is_sync), after, side="right")
            ok = nxt < int(is_sync.sum())
            first = rows[after[ok] + 1]
            end_sync = sync_rows[nxt[ok]]
            ps, pe = f.ts[first], f.ts[end_sync]
            keep = pe > ps
            if ctx.coverage is not None:
                keep &= ctx.coverage.fully_covered(ps, pe)
            ps, pe = ps[keep], pe[keep]
            launch_rows = rows[in_ops(f.op[rows], LAUNCH_OPS)]
            n, sampled = self._phase_launches(ctx, p, rows, launches, ps, pe)
            # Steps of many launches; host time only while a feeding thread was on a CPU.
            many = n >= LAUNCH_PER_STEP
            ps, pe, n = ps[many], pe[many], n[many]
            if len(ps) < MIN_STEPS:
                continue
            busy = (pe - ps) - _host_idle(ctx, p, feeders, ps, pe)
            on_cpu = float(busy.sum()) / max(float((pe - ps).sum()), 1.0)
            phase = int(busy.sum())
            # The median step: robust to the few steps of many more launches (an optimizer or eval step). Scaled
            # from a sample of the rows, it reads a stand-in loop's 400 launches a step as ~480, while the mean
            # read a real training run's 476 (CUPTI) as 540: the median stays.
            per_step = float(np.median(n))
            per_step_launch = busy / n  # each step's host time per launch
            per_launch = int(np.median(per_step_launch))
            launch_ns = int(np.median(f.dur[launch_rows])) if len(launch_rows) else 0
            if per_launch < max(LAUNCH_GAP_NS, 2 * launch_ns):
                continue  # back to back: the launch call's own cost, not host code between launches
            wall = ctx.pid_span_ns(p)
            if ctx.coverage is not None:
                lo, hi = ctx.call_spans.get(p, (0, 0))
                wall = min(wall, max(ctx.coverage.covered_ns(lo, hi), 1))
            share = phase / max(wall, 1)
            if share < LAUNCH_SHARE:
                continue  # launching on a CPU is a small part of the time
            between = int(share * wall)
            lines = [
                f"{len(ps)} steps of ~{per_step:.0f} launches each"
                + (" (estimated: the rows were read as a sample)" if sampled else "")
                + f"; launching takes {share:.0%} of the time on a "
                f"CPU, {fmt_ns(per_launch)} of host time per launch (the launch call itself {fmt_ns(launch_ns)})"
                + (
                    f"; no feeding thread on a CPU {1 - on_cpu:.0%} of the launch phases besides"
                    if on_cpu < 0.9
                    else ""
                ),
                f"the synchronisations found the GPU done (median {fmt_ns(int(np.median(f.dur[sync_rows])))}): "
                "the GPU waited for each launch",
            ]
            fix = (
                "launch fewer, larger kernels: capture the step in a CUDA Graph (torch.cuda.graphs, "
                'torch.compile(mode="reduce-overhead")), fuse ops (torch.compile), or use larger batches'
            )
            metrics: dict[str, float | int] = {"per_launch_ns": per_launch, "launches_per_step": round(per_step, 1)}
            causes = [Cause(self.id, tuple(lines), metrics=metrics)]
            host = host_time_cause(ctx.cpu_samples, {p}, ps, pe, feeders, "between launches")
            if host is not None:
                causes.append(host.cause)
                fix += f"; between launches the host runs {host.hot[0].render()} most: make it cheaper or move it out of the step"
            # per_launch is the median of per_step_launch: the same p50 the symptom reads.
            sym = spread_symptom(
                f"pid {p} spends {share:.0%} of its time launching ~{per_step:.0f} tiny kernels a step",
                "gpu-idle",
                p,
                f.comm(p),
                per_step_launch,
                between,
                count=launches,
            )
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=Severity.HIGH if share >= 0.75 else Severity.MEDIUM,
                    symptom=sym,
                    causes=tuple(causes),
                    fix=fix,
                    lost_ns=between,
                    wall_ns=wall,
                )
            )
        return out

    @staticmethod
    def _launches(ctx: Context, pid: int, rows: np.ndarray) -> int:
        """The process's launches in the window, a runtime launch and the driver launch inside it once: its
        launch rows where they are all stored, else every call counted (aggregates, estimates under the
        budget) scaled by the share of stored launch rows that are not inside another."""
        f = ctx.frame
        outer = int(in_ops(f.op[rows], LAUNCH_OPS).sum())
        if ctx.aggregates is None:
            return outer
        counted = 0
        for op in LAUNCH_OPS:
            summary = ctx.op_summary(pid, op)
            counted += summary[0] if summary is not None else 0
        stored = len(ctx.pid_calls_of(pid, LAUNCH_OPS))
        return int(counted * outer / stored) if stored else counted

    @staticmethod
    def _phase_launches(
        ctx: Context, pid: int, rows: np.ndarray, launches: int, ps: np.ndarray, pe: np.ndarray
    ) -> tuple[np.ndarray, bool]:
        """Launches in each phase, and whether that is an estimate: its launch rows where every launch has
        one (inside a probe window too); where they were read selectively, its rows times the calls each
        stored row stands for over the whole window."""
        f = ctx.frame
        launch_rows = rows[in_ops(f.op[rows], LAUNCH_OPS)]
        ts = np.sort(f.ts[launch_rows])
        counted: np.ndarray = (np.searchsorted(ts, pe, side="left") - np.searchsorted(ts, ps, side="left")).astype(
            np.float64
        )
        if any((pid, op) in ctx.thinned for op in LAUNCH_OPS) and len(launch_rows):
            return counted * max(launches / len(launch_rows), 1.0), True
        return counted, False


class GilBoundRule:
    """The feeding thread waits, again and again, for the GIL another thread of its process holds
    (``gpuscope.analysis.gil`` says how that is read)."""

    id = "gil-bound"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f = ctx.frame
        out = []
        for p in ctx.call_pids:
            g = gil_waits(ctx, p)
            if g is None:
                continue
            d = g.end - g.start
            hot, holder, wall, waited = g.hot, g.holder, g.wall_ns, g.waited_ns
            lines = (
                f"the thread that feeds the GPU lost its CPU {len(d)} times (median {fmt_ns(int(np.median(d)))}) "
                f"while thread {holder} of its own process held the GIL, {fmt_ns(waited)} = {waited / wall:.0%} of "
                f"the time (thread {holder} was on a CPU, or preempted holding it, {g.holder_on_cpu:.0%} of it)",
                f"thread {holder} ran Python meanwhile: "
                + describe_hot(list(hot), g.samples, f"of thread {holder} taken while it waited"),
            )
            fix = (
                f"thread {holder} holds the GIL in {hot[0].render()}: move that work to a process (DataLoader "
                "workers, multiprocessing), release the GIL in it (NumPy/PyTorch ops do), or run it between steps"
            )
            sym = spread_symptom(
                f"the feeding thread of pid {p} waits for the GIL {waited / wall:.0%} of the time",
                "gpu-idle",
                p,
                f.comm(p),
                d,
                waited,
            )
            metrics: dict[str, float | int] = {
                "waits": len(d),
                "holder_tid": holder,
                "host_samples": g.samples,
                "holder_on_cpu": round(g.holder_on_cpu, 3),
            }
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=severity_for(waited, wall),
                    symptom=sym,
                    causes=(Cause(self.id, lines, metrics=metrics),),
                    fix=fix,
                    lost_ns=waited,
                    wall_ns=wall,
                )
            )
        return out


class SyncInLoopRule:
    """A synchronisation every step, then host work with the GPU idle: host and GPU take turns."""

    id = "sync-in-loop"
    host_side = False

    def evaluate(self, ctx: Context) -> list[Finding]:
        f = ctx.frame
        out = []
        for p in ctx.call_pids:
            turns = sync_turns(ctx, p)
            if turns is None:
                continue
            _, feeders = _feeders(ctx, p)
            sync, wall, gs, ge = turns.sync_rows, turns.wall_ns, turns.host_start, turns.host_end
            waited, host, saved = turns.waited_ns, turns.host_ns, turns.saved_ns
            op = Op(int(np.bincount(f.op[sync].astype(np.int64)).argmax()))
            lines = [
                f"{len(sync)} steps each wait for the GPU ({op.name}: {fmt_ns(waited)} = {waited / wall:.0%} of "
                f"the time) and then compute on the host with nothing queued ({fmt_ns(host)} = {host / wall:.0%})",
                f"overlapping them would save up to {fmt_ns(saved)} = {saved / wall:.0%} of the time",
            ]
            fix = (
                "take the synchronisation out of the step: keep losses and metrics on the GPU and read them every "
                "N steps (.item(), .cpu(), .tolist() and printing a tensor all wait), or queue the next step's work "
                "before reading the last one's result"
            )
            causes = [Cause(self.id, tuple(lines), metrics={"steps": len(sync), "saved_ns": saved})]
            hostc = host_time_cause(ctx.cpu_samples, {p}, gs, ge, feeders, "after each wait")
            if hostc is not None:
                causes.append(hostc.cause)
                fix += f"; after the wait the host runs {hostc.hot[0].render()} most"
            sym = spread_symptom(
                f"pid {p} waits for the GPU and then computes, in turn, every step",
                op.name,
                p,
                f.comm(p),
                f.dur[sync],
                waited,
            )
            out.append(
                Finding(
                    rule=self.id,
                    kind=self.id,
                    severity=max(Severity.MEDIUM, min(severity_for(saved, wall), Severity.HIGH)),
                    symptom=sym,
                    causes=tuple(causes),
                    fix=fix,
                    lost_ns=saved,
                    wall_ns=wall,
                )
            )
        return out


__all__ = ["GilBoundRule", "LaunchBoundRule", "SyncInLoopRule"]
