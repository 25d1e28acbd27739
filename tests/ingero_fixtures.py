"""The reference system's sample recordings, carried in ``tests/fixtures/ingero`` (see its NOTICE).

A test that needs one calls ``ingero_fixture(name)``. The files are part of
the repository, so a missing one is a broken checkout: the test fails, never
skips (a suite must not turn green by skipping what it could not find).
"""

from __future__ import annotations

from pathlib import Path

import pytest

INGERO_DIR = Path(__file__).resolve().parent / "fixtures" / "ingero"
INGERO_NODE_FILES = ("sample-gpu-node-01.db", "sample-gpu-node-02.db")


def ingero_fixture(name: str) -> Path:
    """The path of one of the reference system's sample recordings; the test fails without it."""
    path = INGERO_DIR / name
    if not path.is_file():
        pytest.fail(f"Ingero sample recording not found: {path} (the repository carries it: a broken checkout?)")
    return path
