"""A recording as a Parquet dataset, Hive-partitioned, for the engines that query a fleet's worth of data.

Layout: ``OUT/node=<node>/date=<YYYY-MM-DD>/<session uuid>.parquet``, one
file per session (``date`` is the session's start, UTC). Several nodes export
into one ``OUT`` (a bucket, a shared folder) and DuckDB, Spark, Trino or
ClickHouse read it as one table; ``node`` and ``date`` come from the path.
A session's file is written beside its final name and renamed into place, so
a reader never sees half of one, and exporting a session again replaces it.
Rows stream through in batches: memory does not grow with the recording.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuscope.errors import UsageError
from gpuscope.query.guarded import GuardedReader
from gpuscope.store.events_read import COLUMNAR_COLUMNS, columnar_batches, columnar_sessions

_STRING = {"event_id", "comm", "source", "op"}
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class ParquetStats:
    files: list[str] = field(default_factory=list)
    rows: int = 0
    sessions: int = 0


def schema() -> Any:
    """The files' Arrow schema: strings for names, int64 for every number (as in the ``events`` view)."""
    import pyarrow as pa

    fields = [pa.field(c, pa.string() if c in _STRING else pa.int64()) for c in COLUMNAR_COLUMNS]
    fields.append(pa.field("time", pa.timestamp("ns", tz="UTC")))
    return pa.schema(fields)


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise UsageError(
            "--format parquet needs pyarrow", remedy="pip install 'gpuscope[parquet]' (or pip install pyarrow)"
        ) from None
    return pyarrow


def export_parquet(reader: GuardedReader, out: Path) -> ParquetStats:
    """Write every session with events in ``reader``'s view (its filters apply) under ``out``.

    A failure leaves no folder this call made empty behind (a session's file
    renamed into place before it stays, as its own complete file).
    """
    stats = ParquetStats()
    made: list[Path] = []  # folders this export made: a failure removes those it left empty
    try:
        _write_sessions(reader, out, stats, made)
    except BaseException:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass  # holds a session's file written before the failure (or another writer's)
        raise
    return stats


def _write_sessions(reader: GuardedReader, out: Path, stats: ParquetStats, made: list[Path]) -> None:
    pa = _pyarrow()
    import pyarrow.parquet as pq

    target = schema()
    wall = COLUMNAR_COLUMNS.index("wall_ns")
    for sid, uuid, node, started in columnar_sessions(reader.conn):
        day = dt.datetime.fromtimestamp(started / 1e9, tz=dt.timezone.utc).date().isoformat()
        folder = out / f"node={_SAFE.sub('_', node)}" / f"date={day}"
        _make_folders(folder, made)
        final = folder / f"{_SAFE.sub('_', uuid)}.parquet"
        partial = folder / f".{final.name}.{os.getpid()}.tmp"
        try:
            with pq.ParquetWriter(partial, target, compression="zstd") as writer:
                for rows in columnar_batches(reader.conn, sid):
                    columns = list(zip(*rows, strict=True))
                    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, target, strict=False)]
                    arrays.append(pa.array(columns[wall], type=pa.int64()).cast(target.field("time").type))
                    writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=target))
                    stats.rows += len(rows)
            os.replace(partial, final)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        stats.files.append(str(final))
        stats.sessions += 1


def _make_folders(folder: Path, made: list[Path]) -> None:
    """``mkdir -p folder``, each folder it makes appended to ``made``, outermost first."""
    missing = []
    for parent in (folder, *folder.parents):
        if parent.is_dir():
            break
        missing.append(parent)
    for each in reversed(missing):
        try:
            each.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to remove
        made.append(each)
