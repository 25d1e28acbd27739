"""Readers of other tools' recordings: each converts a file into gpuscope's schema."""

from __future__ import annotations

import os
from pathlib import Path

from gpuscope.importers.ingero import ImportReport, Progress, import_ingero, open_source
from gpuscope.store.build import build_database
from gpuscope.store.connect import connect_probe

__all__ = ["ImportReport", "every_event_has_a_node", "import_file"]


def import_file(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    node: str | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Convert an Ingero database into a new gpuscope database at ``dest``.

    ``dest`` is replaced only when the whole file converted; ``node`` names
    rows recorded without a node (and renames a single-node file).

    Raises DatabaseError for a missing, corrupt or non-Ingero source and
    UsageError when rows have no node and ``node`` is not given.
    """
    path = Path(source).expanduser().resolve()
    src = open_source(path)
    try:
        with build_database(dest) as out:
            return import_ingero(src, out, str(path), node=node, progress=progress)
    finally:
        src.close()


def every_event_has_a_node(source: str | os.PathLike[str]) -> bool:
    """Whether every event of an Ingero file names its node (older files do not)."""
    conn = connect_probe(Path(source).expanduser())
    try:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(events)")}
        if "node" not in cols:
            return False
        return int(conn.execute("SELECT count(*) FROM events WHERE coalesce(node, '') = ''").fetchone()[0]) == 0
    finally:
        conn.close()
