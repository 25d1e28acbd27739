"""Properties of the reference-system importer over mutated files: a readable recording, or one clear error.

Each example takes a reference file (rebuilt without its NOT NULL
constraints, as a file written by another tool may be), puts generated
values (extreme integers, reals, text, blobs, NULL) into a few cells, and
imports it.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpuscope.errors import GpuscopeError
from gpuscope.importers import import_file
from gpuscope.store.connect import connect_reader
from tests.ingero_fixtures import ingero_fixture
from tests.unit.properties import quick

values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 2**62, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=12),
)


def _loosened_copy(source: Path, dest: Path) -> tuple[Path, list[tuple[str, str]]]:
    """A copy of ``source`` whose tables allow NULL anywhere; returns it and its (table, column) cells."""
    shutil.copyfile(source, dest)
    dest.chmod(0o644)
    conn = sqlite3.connect(dest, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("UPDATE sqlite_master SET sql = replace(sql, 'NOT NULL', '') WHERE type = 'table'")
        conn.execute("PRAGMA writable_schema=OFF")
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        cells = [
            (t, str(c[1]))
            for t in tables
            if not t.startswith("sqlite_")
            for c in conn.execute(f'PRAGMA table_info("{t}")')
            if not c[5]  # not the primary key: a changed key is another row, not a bad value
        ]
    finally:
        conn.close()
    return dest, cells


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, str]]]:
    folder = tmp_path_factory.mktemp("reference")
    return _loosened_copy(ingero_fixture("sample-gpu-node-01.db"), folder / "base.db")


def test_a_mutated_reference_file_imports_into_a_readable_recording_or_fails_clearly(
    reference: tuple[Path, list[tuple[str, str]]], tmp_path: Path
) -> None:
    base, cells = reference
    counter = iter(range(10_000))

    @quick(60)
    @given(st.lists(st.tuples(st.sampled_from(cells), st.integers(0, 300), values), min_size=1, max_size=3))
    # Found by wider runs: a blob as a node name, a NULL chain time, a sector count that overflows once in bytes,
    # a blob in the session's flags.
    @example([(("events", "node"), 67, b"u\t\xfbc"), (("events", "pid"), 191, b"u")])
    @example([(("causal_chains", "detected_at"), 0, None)])
    @example([(("events", "arg0"), 140, -(2**63))])
    @example([(("sessions", "flags"), 0, b"N\xe2K")])
    def check(mutations: list[tuple[tuple[str, str], int, object]]) -> None:
        # given a copy with a few cells changed
        n = next(counter)
        source, out = tmp_path / f"in-{n}.db", tmp_path / f"out-{n}.db"
        shutil.copyfile(base, source)
        conn = sqlite3.connect(source, isolation_level=None)
        try:
            for (table, column), row, value in mutations:
                conn.execute(
                    f'UPDATE "{table}" SET "{column}" = ? '
                    f'WHERE rowid = (SELECT rowid FROM "{table}" ORDER BY rowid LIMIT 1 OFFSET ?)',
                    (value, row),
                )
        finally:
            conn.close()
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        # when it is imported
        try:
            import_file(source, out)
        except GpuscopeError as exc:
            # then a clear error, and no output
            assert "\n" not in str(exc)
            assert not out.exists()
        else:
            # or a recording every reader reads
            connect_reader(out).close()
        assert hashlib.sha256(source.read_bytes()).hexdigest() == digest
        assert sorted(p.name for p in tmp_path.glob(f"*-{n}.db*")) == [p.name for p in (source, out) if p.exists()]

    check()
