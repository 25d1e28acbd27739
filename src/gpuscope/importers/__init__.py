"""Readers of other tools' recordings: each converts a file into gpuscope's schema."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscope.config import expand_home
from gpuscope.errors import DatabaseError
from gpuscope.platform.files import atomic_output, database_write_failure, refuse_same_file
from gpuscope.store.build import build_database
from gpuscope.store.connect import connect_probe
from gpuscope.store.liveness import recording_holders

if TYPE_CHECKING:
    from gpuscope.importers.ingero import ImportReport, Progress

__all__ = ["every_event_has_a_node", "import_file"]


def import_file(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    node: str | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Convert an Ingero database into a new gpuscope database at ``dest``.

    ``dest`` is replaced only when the whole file converted and is on disk
    (``gpuscope.platform.files.atomic_output``): a failed or killed conversion
    never leaves a partial file under that name, so a conversion cache that
    trusts any file it finds there is safe. ``node`` names rows recorded
    without a node (and renames a single-node file).

    Raises SameFileError when ``dest`` is the source (under any name),
    OutputBusyError when a process has ``dest`` open, DatabaseError for a
    missing, corrupt or non-Ingero source, OutputError when ``dest`` cannot be
    written, and UsageError when rows have no node and ``node`` is not given.
    """
    # Loaded here, not at import: every command that opens a recording imports this package.
    from gpuscope.importers.ingero import REPAIR, import_ingero, open_source

    refuse_same_file(dest, [source])
    # realpath, not Path.resolve: a symlink loop must reach open_source's "no such file", not raise RuntimeError.
    path = Path(os.path.realpath(expand_home(source)))
    src = open_source(path)
    try:
        # build_database fills ``tmp``; atomic_output adds the fsync, the checks on dest and the final rename.
        with atomic_output(dest, holders=recording_holders) as tmp, build_database(tmp) as out:
            return import_ingero(src, out, str(path), node=node, progress=progress)
    except sqlite3.IntegrityError as exc:
        # A value gpuscope's schema cannot take (a NULL where Ingero's schema had NOT NULL, in a changed file).
        raise DatabaseError(f"{path}: a value cannot be imported ({exc})", remedy=REPAIR) from None
    except sqlite3.Error as exc:
        failure = database_write_failure(exc, dest)
        if failure is None:
            raise
        raise failure from None
    finally:
        src.close()


def every_event_has_a_node(source: str | os.PathLike[str]) -> bool:
    """Whether every event of an Ingero file names its node (older files do not)."""
    conn = connect_probe(expand_home(source))
    try:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
        if "node" not in cols:
            return False
        return int(conn.execute("SELECT count(*) FROM events WHERE coalesce(node, '') = ''").fetchone()[0]) == 0
    finally:
        conn.close()
