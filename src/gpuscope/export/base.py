"""What an exporter is: a name, and a function from a guarded reader to a stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TextIO

from gpuscope.query.guarded import GuardedReader


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """``max_events``: keep the first N events by time (None: all).
    ``counter_interval_ns``: width of the buckets behind the rate counters.
    ``explain``: run the explain engine for finding markers (loads the
    analysed window in memory) instead of reading the stored latest run.
    """

    max_events: int | None = None
    counter_interval_ns: int = 1_000_000_000
    explain: bool = False


@dataclass
class ExportStats:
    events_written: int = 0
    events_cut: int = 0
    threads: int = 0  # of the traced processes
    other_threads: int = 0  # of other processes: machine-wide host events only, labelled so
    nodes: int = 0
    findings: int = 0
    counters: int = 0
    flows: int = 0  # cause -> symptom arrows
    findings_source: str = "none"


class Exporter(Protocol):
    name: str
    description: str

    def export(self, reader: GuardedReader, out: TextIO, options: ExportOptions) -> ExportStats: ...
