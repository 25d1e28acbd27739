"""Each NCCL rank's progress as the agent reads it, and the ranks that stopped while their peers went on.

A hung collective is the one finding that must come while the job still
runs, and on the machine where it is least likely to: a rank stuck in a
spin-wait keeps its CPU busy. The explain rules run in a child process at
idle priority (``gpuscope.tui.explain_process``), which gets no CPU at all
while every CPU is taken. So the agent keeps, from the rows it decodes
anyway, a few numbers per NCCL process (collectives returned, the last
return, its communicator and rank) and finds the hang itself: a handful of
comparisons per batch, no SQL, no scan.

The shape is the one ``analysis.rules.nccl_hang`` finds in a recording:
calls are recorded at their return, so a collective in flight is a rank
whose NCCL calls stopped (until it exited, or until now) for longer than the
threshold while a peer of its communicator completed collectives after its
last return. A single call that returned after the threshold is the other
shape.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field

import numpy as np

from gpuscope.model.ops import OPS, Op, OpKind

# Op ids are laid out by source: the NCCL ones are 128..191 (gpuscope.model.ops).
_NCCL_FIRST, _NCCL_END = 128, 192
_COLLECTIVES = np.array(sorted(int(i.op) for i in OPS.values() if i.kind is OpKind.COLLECTIVE), dtype=np.int64)
_INITS = (int(Op.ncclCommInitRank), int(Op.ncclCommInitRankConfig))
_EXIT = int(Op.process_exit)
# The recent collectives kept per rank: enough to see that a peer went on, and with what.
RECENT = 64
# Processes remembered at most (the oldest exited ones are forgotten first).
MAX_RANKS = 4096
# A call that returned late stays a finding this long after its return (the live explain horizon).
LATE_HORIZON_NS = 60_000_000_000


@dataclass(slots=True)
class _Rank:
    comm: str
    comm_hash: int = 0  # 0: no communicator seen (every such process is taken as one job)
    rank: int | None = None
    joined: bool = False  # its communicator init was read (its collectives are counted from the start)
    collectives: int = 0
    last_end_ns: int = 0
    exit_ns: int | None = None
    recent: collections.deque[tuple[int, int]] = field(default_factory=lambda: collections.deque(maxlen=RECENT))
    late: tuple[int, int, int] | None = None  # the longest call: (op, duration, return time)


@dataclass(frozen=True, slots=True)
class RankRef:
    pid: int
    rank: int | None
    comm: str


@dataclass(frozen=True, slots=True)
class NcclHang:
    """A rank that has not returned from NCCL for ``silence_ns`` while ``ahead`` (peer, collectives more) went on.

    ``late_op`` set: the other shape, one call (``late_op``) that returned ``silence_ns`` after its entry.
    """

    who: RankRef
    silence_ns: int
    exited: bool = False
    stuck_op: int | None = None
    ahead: tuple[tuple[RankRef, int], ...] = ()
    late_op: int | None = None


class NcclProgress:
    """Per NCCL process: collectives returned, the last return, communicator and rank (see the module).

    ``update`` runs on the collector thread for every batch read; ``hangs`` on any thread.
    """

    def __init__(self) -> None:
        self._ranks: dict[int, _Rank] = {}
        self._lock = threading.Lock()

    def update(self, ev: np.ndarray) -> None:
        ops = ev["op"]
        sel = ((ops >= _NCCL_FIRST) & (ops < _NCCL_END)) | (ops == _EXIT)
        if not sel.any():
            return
        rows = ev[sel]
        with self._lock:
            for r in rows:
                self._fold(r)

    def _fold(self, r: np.void) -> None:
        pid, op = int(r["pid"]), int(r["op"])
        st = self._ranks.get(pid)
        if op == _EXIT:
            if st is not None:
                st.exit_ns = int(r["ts_ns"])
            return
        if st is None:
            if len(self._ranks) >= MAX_RANKS:
                self._forget_one()
            comm = bytes(r["comm"]).split(b"\0", 1)[0].decode("utf-8", "replace")
            st = self._ranks[pid] = _Rank(comm)
        start, dur = int(r["ts_ns"]), int(r["duration_ns"])
        end = start + dur
        st.last_end_ns = max(st.last_end_ns, end)
        if op in _INITS and int(r["ret"]) == 0:
            st.comm_hash = int(np.int64(r["stream"].view(np.int64)))
            st.rank = int(r["arg0"])
            st.joined = True
        elif op in _COLLECTIVES:
            st.collectives += 1
            st.recent.append((end, op))
        if st.late is None or dur > st.late[1]:
            st.late = (op, dur, end)

    def _forget_one(self) -> None:
        exited = [p for p, s in self._ranks.items() if s.exit_ns is not None]
        victim = min(exited or self._ranks, key=lambda p: self._ranks[p].last_end_ns)
        del self._ranks[victim]

    def hangs(self, now_ns: int, threshold_ns: int) -> list[NcclHang]:
        """The ranks hung at ``now_ns`` (CLOCK_MONOTONIC, the events' clock), longest silence first."""
        with self._lock:
            groups: dict[int, dict[int, _Rank]] = {}
            for pid, st in self._ranks.items():
                groups.setdefault(st.comm_hash, {})[pid] = st
            out = [h for members in groups.values() for h in self._group_hangs(members, now_ns, threshold_ns)]
        out.sort(key=lambda h: -h.silence_ns)
        return out

    @staticmethod
    def _ref(pid: int, st: _Rank) -> RankRef:
        return RankRef(pid, st.rank, st.comm)

    def _group_hangs(self, members: dict[int, _Rank], now_ns: int, threshold_ns: int) -> list[NcclHang]:
        out = []
        # Counted from the start when every rank's init was read; otherwise (attached to a running job) only
        # what a peer returned after this rank's last return says that it went on.
        joined = all(st.joined for st in members.values())
        for pid, st in members.items():
            if st.late is not None and st.late[1] >= threshold_ns and now_ns - st.late[2] <= LATE_HORIZON_NS:
                out.append(NcclHang(self._ref(pid, st), st.late[1], late_op=st.late[0]))
                continue
            silence = (st.exit_ns if st.exit_ns is not None else now_ns) - st.last_end_ns
            if silence < threshold_ns:
                continue
            ahead = []
            stuck: tuple[int, int] | None = None  # (return, op) of the first collective a peer made after ours
            for peer, theirs in members.items():
                if peer == pid:
                    continue
                after = [(end, op) for end, op in theirs.recent if end > st.last_end_ns]
                n = max(theirs.collectives - st.collectives if joined else 0, len(after))
                if n > 0:
                    ahead.append((self._ref(peer, theirs), n))
                if after and (stuck is None or after[0] < stuck):
                    stuck = after[0]
            if not ahead:
                continue  # everyone stopped: a pause of the whole job, or its end
            out.append(
                NcclHang(
                    self._ref(pid, st),
                    silence,
                    exited=st.exit_ns is not None,
                    stuck_op=stuck[1] if stuck is not None else None,
                    ahead=tuple(sorted(ahead, key=lambda a: a[0].pid)),
                )
            )
        return out


__all__ = ["NcclHang", "NcclProgress", "RankRef"]
