"""Docs are kept honest by tests: every table, view and column is documented."""

from __future__ import annotations

import re
from pathlib import Path

from gpuscope.cli import COMMANDS
from gpuscope.store.connect import connect_writer

ROOT = Path(__file__).resolve().parents[2]


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### (\w+)\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_table_view_and_column_is_in_docs_schema(tmp_path: Path) -> None:
    conn = connect_writer(tmp_path / "a.db")
    sections = _sections((ROOT / "docs" / "schema.md").read_text())
    objects = conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    missing = []
    for (name,) in objects:
        if name not in sections:
            missing.append(name)
            continue
        text = sections[name]
        for parent in ("events", "cuda_calls", "nccl_calls"):
            if f"every column of `{parent}`" in text:
                text += sections.get(parent, "") + sections.get("events", "")
        for col in conn.execute(f"PRAGMA table_info({name})").fetchall():
            if f"`{col[1]}`" not in text:
                missing.append(f"{name}.{col[1]}")
    assert not missing, f"undocumented in docs/schema.md: {missing}"


def test_every_subcommand_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in COMMANDS:
        assert f"gpuscope {name}" in readme, name
