"""The code base keeps its shape: SQL lives in the store, and the layers are checked by import-linter."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuscope"
# The store owns gpuscope's SQL; query/ is the user-SQL surface (guard, filter views); importers/
# read other tools' schemas.
SQL_HOMES = ("store", "query", "importers")
_SQL = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|PRAGMA|ATTACH|DETACH|WITH|REPLACE|BEGIN|COMMIT|VACUUM)\b"
    r"|\b(FROM|INTO|SET|WHERE)\b.*\b(event_log|sessions|processes|stacks|findings|event_aggregates|sqlite_master)\b",
    re.IGNORECASE,
)


def _sql_literals(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.search(node.value):
            # A docstring that talks about a table is prose, not SQL: it has no SQL statement shape.
            if re.search(r"\b(SELECT|INSERT|UPDATE|DELETE|PRAGMA|CREATE)\b", node.value):
                out.append((node.lineno, node.value.strip().splitlines()[0][:80]))
    return out


def _outside_sql_homes() -> list[Path]:
    return [
        p for p in sorted(SRC.rglob("*.py")) if p.relative_to(SRC).parts[0] not in SQL_HOMES and "_bpf" not in p.parts
    ]


def test_sql_text_appears_only_in_the_store_the_query_surface_and_the_importers() -> None:
    offenders = {str(p.relative_to(SRC)): lines for p in _outside_sql_homes() if (lines := _sql_literals(p))}
    assert offenders == {}, "move these statements into a named function in gpuscope/store/"


def test_the_sql_detector_finds_a_statement_in_a_string(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text('Q = "SELECT id FROM event_log WHERE pid = ?"\nDOC = "rows of the sessions table"\n')
    assert [line for line, _ in _sql_literals(sample)] == [1]


@pytest.mark.skipif(
    shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None, reason="no lint-imports"
)
def test_the_layer_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None
    res = subprocess.run([lint], cwd=SRC.parents[1], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]
