"""Readers of other tools' recordings: each converts a file into gpuscope's schema."""

from __future__ import annotations

import os
from pathlib import Path

from gpuscope.importers.ingero import ImportReport, Progress, import_ingero, open_source
from gpuscope.store.fresh import fresh_database

__all__ = ["ImportReport", "import_file"]


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
        with fresh_database(dest) as out:
            return import_ingero(src, out, str(path), node=node, progress=progress)
    finally:
        src.close()
