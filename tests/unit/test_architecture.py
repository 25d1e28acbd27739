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
# Statement keywords as SQL is written here: upper case. Prose says "select" or "the sessions table".
_SQL = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|PRAGMA|CREATE|DROP|ALTER|ATTACH|DETACH|VACUUM|BEGIN|COMMIT|ROLLBACK)\b"
)


# Text that shows SQL to a person rather than running it: (module, how the string starts).
SHOWN_NOT_RUN = {
    ("commands/query.py", "one SELECT statement, e.g."),  # --help example
    ("demo/render.py", '"SELECT op, count(*) FROM events'),  # the demo's "next:" line
    ("agent/versions.py", "COMMIT"),  # the build stamp file's name
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            out.add(id(body[0].value))
    return out


def _sql_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    module = str(path.relative_to(SRC)) if path.is_relative_to(SRC) else path.name
    return [
        (node.lineno, node.value.strip().splitlines()[0][:80])
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and _SQL.search(node.value)
        and not any(module == m and node.value.strip().startswith(start) for m, start in SHOWN_NOT_RUN)
    ]


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
