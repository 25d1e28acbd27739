"""What a session's row says about its recording: the kernel's counters, the drops by source, the rows the
store could not keep, the traced processes and the libraries probed."""

from __future__ import annotations

from gpuscope.agent.tracer import AttachedLibrary
from gpuscope.model.drops import DROP_SOURCES
from gpuscope.stacks.collector import StackCollector
from gpuscope.store.sessions_write import SessionCounts
from gpuscope.store.writer import EventWriter


class DropDeltas:
    """The drops of each source since the last ``take`` (the kernel's counters only grow)."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def take(self, counters: dict[str, int]) -> dict[str, int]:
        delta: dict[str, int] = {}
        for key, source in DROP_SOURCES.items():
            n = counters.get(key, 0) - self._seen.get(key, 0)
            if n > 0:
                delta[source] = delta.get(source, 0) + n
            self._seen[key] = counters.get(key, 0)
        return delta


def session_counts(
    counters: dict[str, int],
    writer: EventWriter,
    stacks: StackCollector | None,
    *,
    events: int,
    targets: list[int],
    libraries: list[AttachedLibrary],
) -> SessionCounts:
    """The session row's counts now: the kernel's counters, with what the store and the stacks lost."""
    drops = dict(counters)
    # Rows the store could not keep (the aggregates still count their events).
    drops["rows_shed_db_cap"] = writer.rows_shed
    drops["rows_lost_store"] = writer.rows_lost
    # Stored calls left without a stack: their site's full stack was lost to a full stack ring.
    drops["stacks_unattributed"] = stacks.unattributed if stacks is not None else 0
    return SessionCounts(
        events_recorded=events,
        events_dropped=counters["dropped"],
        drops=drops,
        targets=tuple(targets),
        libraries=tuple(
            {"path": a.library.path, "kind": a.library.kind, "version": a.library.version, "probes": a.probes}
            for a in libraries
        ),
    )
