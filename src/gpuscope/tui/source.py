"""Adapt a running ``TraceSession`` to the snapshot builder's ``CollectorSource``."""

from __future__ import annotations

from gpuscope.agent.live_stats import Tick
from gpuscope.agent.session import TraceSession
from gpuscope.tui.live_snapshot import CollectorSample, Header, LibraryInfo


class SessionSource:
    """Read a session's live statistics from the builder thread.

    The session's libraries and kernel counters are read on the collector
    thread only: ``on_tick`` (the session's tick callback) records them, and
    the builder thread reads the recorded values.
    """

    def __init__(self, session: TraceSession, targets: str) -> None:
        self.session = session
        self.targets = targets
        self._dropped = 0
        self._header = self._read_header()

    def _read_header(self) -> Header:
        s = self.session
        return Header(
            targets=self.targets,
            libraries=tuple(
                LibraryInfo(a.library.kind, a.library.path, a.library.version, a.probes) for a in s.attached
            ),
            host_tracepoints=tuple(s.tracer.host_links),
            probe_mode="uprobe_multi" if s.tracer.multi else "classic uprobes",
            db_path=str(s.db_path),
        )

    def on_tick(self, tick: Tick) -> None:
        """Record what only the collector thread may read (called once a second by the session)."""
        self._dropped = tick.dropped
        self._header = self._read_header()

    def set_dropped(self, dropped: int) -> None:
        self._dropped = dropped

    def header(self) -> Header:
        return self._header

    def sample(self) -> CollectorSample:
        stats = self.session.stats.copy()
        sampler = self.session.sampler
        covered, elapsed = sampler.coverage()
        return CollectorSample(
            sampled_ops=sampler.sampled_ops,
            covered_ns=covered,
            elapsed_ns=elapsed,
            budget=sampler.budget,
            self_costs=tuple((c.pid, c.share) for c in sampler.self_costs()),
            per_op=stats.per_op,
            events=stats.events,
            dropped=self._dropped,
            processes=len(stats.pids),
            preempted=stats.preempted,
            preempted_ns=stats.preempted_ns,
            preemptors=stats.preemptors,
        )
