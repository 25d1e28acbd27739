"""Facts about an open database itself."""

from __future__ import annotations

import os
from pathlib import Path

from gpuscope.store.connect import database_path
from tests.unit.analysis.builder import Events

from .recordings import reading, record


def test_the_database_path_is_the_file_the_connection_reads(tmp_path: Path) -> None:
    path = record(Events(), tmp_path / "a#b 100%.db")
    with reading(path) as conn:
        assert os.path.realpath(database_path(conn)) == os.path.realpath(path)
