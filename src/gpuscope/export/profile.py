"""Exporters of the on-CPU profile: speedscope JSON and folded stacks, for flame graph viewers.

Both read the recording's on-CPU samples through the reader (its filters,
``--pid`` and the time window, apply) and weigh each stack by its sample
count: an estimate of CPU time, so never written as seconds.
"""

from __future__ import annotations

import json
from typing import TextIO

from gpuscope.export.base import ExportOptions, ExportStats
from gpuscope.query.guarded import GuardedReader
from gpuscope.stacks.profile import CpuProfile, cpu_profile, folded_lines, speedscope_document
from gpuscope.store.processes_read import process_rows


def _profile(reader: GuardedReader) -> tuple[CpuProfile, dict[int, str]]:
    profile = cpu_profile(reader.conn)
    # The newest session's name of each pid (rows come oldest session first).
    return profile, {pid: comm for pid, comm, _ in process_rows(reader.conn) if comm}


def _stats(profile: CpuProfile) -> ExportStats:
    return ExportStats(
        events_written=profile.samples,
        threads=len({(s.pid, s.tid) for s in profile.stacks}),
        nodes=1 if profile.samples else 0,
    )


class SpeedscopeExporter:
    """One sampled profile per thread (https://www.speedscope.app, File > Import)."""

    name = "speedscope"
    description = "the on-CPU profile as a speedscope file (one profile per thread)"

    def export(self, reader: GuardedReader, out: TextIO, options: ExportOptions) -> ExportStats:
        profile, comms = _profile(reader)
        json.dump(speedscope_document(profile, "gpuscope on-CPU samples", comms), out, ensure_ascii=False)
        out.write("\n")
        return _stats(profile)


class FoldedExporter:
    """``process;thread;outermost;...;innermost count`` lines (flamegraph.pl, inferno, speedscope)."""

    name = "folded"
    description = "the on-CPU profile as folded stacks, one line per distinct stack"

    def export(self, reader: GuardedReader, out: TextIO, options: ExportOptions) -> ExportStats:
        profile, comms = _profile(reader)
        for line in folded_lines(profile, comms):
            out.write(line + "\n")
        return _stats(profile)
