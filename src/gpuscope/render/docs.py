"""The guides in ``docs/``, shipped inside the package so ``gpuscope docs TOPIC`` works from a wheel.

A wheel carries them as ``gpuscope/_docs`` (``force-include`` in
pyproject.toml); a source checkout reads ``docs/`` beside ``src/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    title: str
    path: Path


def docs_dir() -> Path | None:
    """The folder of the guides: the package's own copy, else the checkout's ``docs/``; None when neither exists."""
    for candidate in (_PACKAGE / "_docs", _PACKAGE.parent.parent / "docs"):
        if (candidate / "trace.md").is_file():
            return candidate
    return None


def topics() -> list[Topic]:
    """Every guide, by name (the file name without ``.md``), with its title (the first heading)."""
    folder = docs_dir()
    if folder is None:
        return []
    out = []
    for path in sorted(folder.glob("*.md")):
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
        out.append(Topic(path.stem, first.lstrip("# ").replace("`", ""), path))
    return out


def find_topic(name: str) -> Topic | None:
    """The guide called ``name`` (``query``, ``query.md`` or ``docs/query.md``), or None."""
    stem = Path(name).name.removesuffix(".md")
    return next((t for t in topics() if t.name == stem), None)
