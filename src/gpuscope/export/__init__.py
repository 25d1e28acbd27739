"""Exporters: a registry of formats, each streaming a recording to a file.

Built-in formats are registry entries like any extension would be (STYLE
habit 7): ``EXPORTERS["perfetto"]`` writes Chrome Trace Event JSON.
"""

from gpuscope.export.base import Exporter, ExportOptions, ExportStats
from gpuscope.export.perfetto import PerfettoJsonExporter
from gpuscope.export.profile import FoldedExporter, SpeedscopeExporter
from gpuscope.export.to_file import export_to_file

EXPORTERS: dict[str, Exporter] = {e.name: e for e in (PerfettoJsonExporter(), SpeedscopeExporter(), FoldedExporter())}
# The formats that write the on-CPU profile (samples), not the timeline of events.
PROFILE_FORMATS = frozenset({"speedscope", "folded"})

__all__ = [
    "EXPORTERS",
    "PROFILE_FORMATS",
    "ExportOptions",
    "ExportStats",
    "Exporter",
    "PerfettoJsonExporter",
    "export_to_file",
]
