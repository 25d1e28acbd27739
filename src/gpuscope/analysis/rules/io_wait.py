"""The GPU process itself waiting on block I/O: reads (and writes) on the thread that should feed the GPU."""

from __future__ import annotations

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.intervals import distinct, overlap_by_key
from gpuscope.analysis.stats import pct, severity_for
from gpuscope.model.findings import Cause, Finding, Symptom
from gpuscope.model.ops import Op
from gpuscope.model.units import fmt_bytes, fmt_ns

MIN_SHARE = 0.1  # of the process's time in the window
MIN_WAIT_NS = 10_000_000


class BlockingIoRule:
    """A traced process off its CPU, waiting for its own block I/O, for a large share of its time.

    ``block-io`` reports CUDA calls slowed while I/O was in flight; this is the
    time between them too: a training thread that reads its dataset or loads a
    checkpoint synchronously leaves the GPU without work, whether or not any
    CUDA call falls inside the wait (recordings of the reference system often
    hold none). A wait is an off-CPU interval of the thread (not a preemption)
    while I/O that the same thread issued was in flight. The thread looked at
    is the process's most blocked CUDA-calling thread, or its most blocked
    thread when no call was recorded. The tracer's own I/O is never a cause.
    """

    id = "blocking-io"
    host_side = True

    def evaluate(self, ctx: Context) -> list[Finding]:
        f = ctx.frame
        io = np.flatnonzero(f.op == int(Op.block_io))
        s = ctx.sched
        if len(io) == 0 or len(s) == 0:
            return []
        blocked = s[f.arg0[s] == 0]  # preemptions are another rule's; stateless rows count as blocked
        # Traced processes: only they have scheduler rows (in gpuscope's recordings and in the reference's).
        pids = sorted((set(distinct(f.pid[blocked]).tolist()) | set(ctx.call_pids)) - set(ctx.tracer_pids))
        out = []
        for pid in pids:
            found = self._process(ctx, pid, blocked[f.pid[blocked] == pid], io[f.pid[io] == pid])
            if found is not None:
                out.append(found)
        return out

    def _process(self, ctx: Context, pid: int, off: np.ndarray, io: np.ndarray) -> Finding | None:
        f = ctx.frame
        if len(off) == 0 or len(io) == 0:
            return None
        waited = overlap_by_key(
            f.tid[off], f.ts[off], f.ts[off] + f.dur[off], f.tid[io], f.ts[io], f.ts[io] + np.maximum(f.dur[io], 1)
        )
        callers = distinct(f.tid[ctx.calls[ctx.pid_calls(pid)]])
        tids = distinct(f.tid[off])
        if len(callers):
            tids = tids[np.isin(tids, callers)]
        if len(tids) == 0:
            return None
        per_tid = {int(t): int(waited[f.tid[off] == t].sum()) for t in tids.tolist()}
        tid, wait = max(per_tid.items(), key=lambda kv: kv[1])
        mine = np.flatnonzero(f.pid == pid)
        lo = max(int(f.ts[mine].min()), ctx.window.start_ns)
        hi = min(int((f.ts[mine] + f.dur[mine]).max()), ctx.window.end_ns)
        span = max(hi - lo, 1)
        if wait < MIN_WAIT_NS or wait < MIN_SHARE * span:
            return None
        own = io[f.tid[io] == tid]
        writes = int((f.arg0[own] == 1).sum())
        d = f.dur[own]
        comm = f.comm(pid)
        who = f"`{comm}` (pid {pid})" if comm else f"pid {pid}"
        lines = (
            f"thread {tid} waited {fmt_ns(wait)} off-CPU for its own block I/O: {wait / span:.0%} of the "
            f"{fmt_ns(span)} the process was active",
            f"{len(own)} requests ({len(own) - writes} reads, {writes} writes), {fmt_bytes(float(f.bytes[own].sum()))}, "
            f"latency p50 {fmt_ns(pct(d, 50))}, max {fmt_ns(float(d.max()))}",
        )
        summary = f"{who} is blocked on block I/O {wait / span:.0%} of its time ({fmt_ns(wait)})"
        symptom = Symptom(
            summary,
            "block_io",
            pid,
            comm,
            count=len(own),
            p50_ns=pct(d, 50),
            p99_ns=pct(d, 99),
            max_ns=int(d.max()),
            total_ns=int(d.sum()),
        )
        return Finding(
            rule=self.id,
            kind=self.id,
            severity=severity_for(wait, span),
            symptom=symptom,
            causes=(Cause(self.id, lines, metrics={"wait_ns": wait, "share": round(wait / span, 3)}),),
            fix="read input off the GPU thread (DataLoader num_workers > 0, prefetch_factor, pin_memory), keep the "
            "dataset on local NVMe or in page cache, load and save checkpoints asynchronously",
            lost_ns=wait,
            wall_ns=span,
        )
