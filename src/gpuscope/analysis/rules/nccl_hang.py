"""NCCL hang: a collective that never returns, while the trace runs or after it.

What a hang looks like without an entry event: calls are recorded when they
return, so a collective in flight is a rank whose NCCL calls stopped while
its peers went on, and whose silence (until it exited, or until now) passed
the threshold. Ranks are grouped by communicator as for the straggler
(``nccl.communicators``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.analysis.context import Context
from gpuscope.analysis.nccl_ranks import (
    COLLECTIVES,
    INIT_OPS,
    NCCL_STEP_OPS,
    Member,
    calls_of,
    communicators,
    hash_text,
    who,
)
from gpuscope.model.findings import Cause, Culprit, Finding, Severity, Symptom
from gpuscope.model.nccl_hang_text import in_flight_summary, peers_text, returned_late_summary
from gpuscope.model.ops import Op, op_name
from gpuscope.model.units import fmt_ns

EXIT = int(Op.process_exit)
DEFAULT_HANG_THRESHOLD_NS = 30_000_000_000


def _ops_in_time_order(ctx: Context, rows: np.ndarray) -> np.ndarray:
    """The ops of ``rows``, by start time."""
    ops: np.ndarray = ctx.frame.op[rows[np.argsort(ctx.frame.ts[rows], kind="stable")]]
    return ops


@dataclass(frozen=True, slots=True)
class _Stall:
    """A rank gone silent in NCCL: for how long, since when, after how many collectives, in which call."""

    silence_ns: int
    last_end_ns: int
    done: int
    stuck: str | None
    exited: bool


class NcclHangRule:
    """A collective that did not return for longer than ``threshold_ns``: CRITICAL.

    Two shapes. In flight: a rank whose NCCL calls stopped (until it exited, or until the
    window's end, which the live view sets to *now*) while its peers completed more
    collectives than it did. Returned late: one NCCL call that itself lasted past the threshold.
    """

    id = "nccl-hang"
    host_side = False

    def __init__(self, threshold_ns: int = DEFAULT_HANG_THRESHOLD_NS) -> None:
        self.threshold_ns = threshold_ns

    def evaluate(self, ctx: Context) -> list[Finding]:
        att = ctx.window_attribution
        f = ctx.frame
        exits = np.flatnonzero(f.op == EXIT)
        exit_ts = {int(p): int(t) for p, t in zip(f.pid[exits].tolist(), f.ts[exits].tolist(), strict=True)}
        out = []
        for comm_hash, members in communicators(ctx, att).items():
            calls = {m.pid: calls_of(ctx, m.pid, NCCL_STEP_OPS | INIT_OPS) for m in members}
            colls = {m.pid: np.sort(f.ts[calls_of(ctx, m.pid, COLLECTIVES)]) for m in members}
            ops = {m.pid: _ops_in_time_order(ctx, calls_of(ctx, m.pid, COLLECTIVES)) for m in members}
            # Count collectives since the communicator began when every rank's init is in the window;
            # otherwise from a common start, so a window that cuts the ranks unevenly does not count.
            firsts = [int(t[0]) for t in colls.values() if len(t)]
            joined = all(len(calls_of(ctx, m.pid, INIT_OPS)) for m in members)
            t0 = 0 if joined or not firsts else max(firsts)
            for m in members:
                mine = calls[m.pid]
                if len(mine) == 0:
                    continue
                long = mine[f.dur[mine] >= self.threshold_ns]
                if len(long):
                    out.append(self._returned_late(ctx, comm_hash, m, int(long[np.argmax(f.dur[long])])))
                    continue
                last_end = int((f.ts[mine] + f.dur[mine]).max())
                until = exit_ts.get(m.pid, ctx.window.end_ns)
                silence = until - last_end
                if silence < self.threshold_ns:
                    continue
                done = int((colls[m.pid] >= t0).sum())
                ahead = {}
                for p in members:
                    if p.pid != m.pid:
                        theirs = colls[p.pid]
                        n = max(int((theirs >= t0).sum()) - done, int((theirs > last_end).sum()))
                        if n > 0:
                            ahead[p.pid] = n
                if not ahead:
                    continue  # everyone stopped: a pause of the whole job, or the end of the run
                # The call it is stuck in: the peers' next collective after as many as this rank completed.
                lead = max(ahead, key=lambda p: ahead[p])
                lead_ops = ops[lead][colls[lead] >= t0]
                stuck = op_name(int(lead_ops[done])) if done < len(lead_ops) else None
                stall = _Stall(silence, last_end, done, stuck, exited=m.pid in exit_ts)
                out.append(self._in_flight(ctx, comm_hash, m, members, ahead, stall))
        return out

    def _extra(self, m: Member, comm_hash: int, silence: int, exited: bool) -> dict[str, float | int | str]:
        return {
            "rank": m.rank if m.rank is not None else -1,
            "comm_hash": hash_text(comm_hash),
            "silence_ns": silence,
            "exited": int(exited),
        }

    def _in_flight(
        self, ctx: Context, comm_hash: int, m: Member, members: list[Member], ahead: dict[int, int], stall: _Stall
    ) -> Finding:
        f = ctx.frame
        by_pid = {p.pid: p for p in members}
        named = [(who(by_pid[p], ctx), n) for p, n in sorted(ahead.items())]
        summary = in_flight_summary(who(m, ctx), stall.silence_ns, stall.exited, stall.stuck, named)
        evidence = (
            f"last NCCL call of {who(m, ctx)} returned at +{fmt_ns(stall.last_end_ns - ctx.window.start_ns)}; "
            f"{stall.done} collectives completed (counted from the ranks' common start in the window)",
            f"peers: {peers_text(named)}",
            f"threshold {fmt_ns(self.threshold_ns)}",
        )
        extra = self._extra(m, comm_hash, stall.silence_ns, stall.exited)
        sym = Symptom(summary, stall.stuck, m.pid, f.comm(m.pid), count=stall.done, extra=extra)
        culprits = tuple(Culprit("peer", p, comm=f.comm(p)) for p in sorted(ahead))
        cause = Cause(
            self.id,
            evidence,
            culprits=(Culprit("hung", m.pid, comm=f.comm(m.pid)), *culprits),
            metrics={"silence_ns": stall.silence_ns, "threshold_ns": self.threshold_ns},
        )
        return Finding(
            rule=self.id,
            kind=self.id,
            severity=Severity.CRITICAL,
            symptom=sym,
            causes=(cause,),
            fix=self._fix(ctx, m),
            lost_ns=stall.silence_ns,
            wall_ns=max(stall.silence_ns, 1),
        )

    def _returned_late(self, ctx: Context, comm_hash: int, m: Member, i: int) -> Finding:
        f = ctx.frame
        dur = int(f.dur[i])
        name = op_name(int(f.op[i]))
        summary = returned_late_summary(who(m, ctx), name, dur)
        evidence = (
            f"{name} of {who(m, ctx)} entered at +{fmt_ns(int(f.ts[i]) - ctx.window.start_ns)} and "
            f"returned {fmt_ns(dur)} later (threshold {fmt_ns(self.threshold_ns)})",
        )
        sym = Symptom(
            summary,
            name,
            m.pid,
            f.comm(m.pid),
            count=1,
            p50_ns=dur,
            p99_ns=dur,
            max_ns=dur,
            total_ns=dur,
            extra=self._extra(m, comm_hash, dur, False),
        )
        cause = Cause(
            self.id,
            evidence,
            culprits=(Culprit("hung", m.pid, comm=f.comm(m.pid)),),
            metrics={"silence_ns": dur, "threshold_ns": self.threshold_ns},
        )
        return Finding(
            rule=self.id,
            kind=self.id,
            severity=Severity.CRITICAL,
            symptom=sym,
            causes=(cause,),
            fix=self._fix(ctx, m),
            lost_ns=dur,
            wall_ns=max(dur, 1),
        )

    @staticmethod
    def _fix(ctx: Context, m: Member) -> str:
        return (
            f"inspect {who(m, ctx)} while it hangs: `py-spy dump --pid {m.pid}` / `gdb -p {m.pid} -ex 'thread "
            "apply all bt'`; set NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 with a collective "
            "timeout (init_process_group(timeout=...)) so a hang fails fast instead of stalling the job"
        )


__all__ = ["DEFAULT_HANG_THRESHOLD_NS", "NcclHangRule"]
