"""Locate the recordings in ``../shared/fixtures``: found from the repository root, required in CI.

A test that needs them calls ``ingero_fixture(name)``. Outside CI a missing
file skips the test (a contributor may have cloned the repository alone); in
CI (``CI`` set) it fails, so a moved or missing fixture can never turn a
suite green by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GPUSCOPE_SHARED_DIR") or ROOT.parent / "shared")
INGERO_DIR = SHARED / "fixtures" / "ingero"
INGERO_NODE_FILES = ("sample-gpu-node-01.db", "sample-gpu-node-02.db")


def ingero_fixture(name: str) -> Path:
    """The path of one of the reference system's sample recordings; skip (locally) or fail (CI) without it."""
    path = INGERO_DIR / name
    if not path.is_file():
        why = f"Ingero sample recording not found: {path} (set GPUSCOPE_SHARED_DIR to the shared/ folder)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path
