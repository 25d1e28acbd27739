"""A fresh recording database and session for each store write test."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionInfo, create_session


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    c = connect_writer(tmp_path / "rec.db")
    yield c
    c.close()


@pytest.fixture
def session_id(conn: sqlite3.Connection) -> int:
    return create_session(conn, SessionInfo("u-1", "node-a", "host-a", "6.8", "0.1", "1.4", 10**18, 5_000, [], {}))
