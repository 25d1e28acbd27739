"""Write an export to a file: whole or not at all, never over the recording it reads."""

from __future__ import annotations

import os

from gpuscope.export.base import Exporter, ExportOptions, ExportStats
from gpuscope.platform.files import OutputError, atomic_output
from gpuscope.query.guarded import GuardedReader


def export_to_file(
    exporter: Exporter, reader: GuardedReader, options: ExportOptions, output: str | os.PathLike[str]
) -> ExportStats:
    """Export into a temporary file beside ``output``, renamed over it once complete and on disk.

    A failure half-way (a full disk, a corrupt page of the recording, Ctrl-C)
    leaves no partial file and an earlier ``output`` as it was. A FIFO or
    device (``/dev/null``) is written in place. The caller refuses an output
    that is the recording itself (``refuse_same_file``) before opening it.

    Raises OutputError when the file cannot be written, and whatever the
    exporter raised (sqlite3.Error for an unreadable recording).
    """
    with atomic_output(output, special_in_place=True) as path:
        try:
            with path.open("w", encoding="utf-8") as out:
                return exporter.export(reader, out, options)
        except OSError as exc:  # reads go through SQLite (sqlite3.Error): an OSError here is the output's
            raise OutputError(f"{os.fspath(output)}: cannot write: {exc.strerror or exc}") from None
