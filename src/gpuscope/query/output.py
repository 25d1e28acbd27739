"""Shared row output: aligned table, JSON, CSV, newline-delimited JSON.

Every row-printing command takes the same options (``add_output_options``).
Machine formats write only data to stdout and stream row by row; the table
buffers rows to align columns.
"""

from __future__ import annotations

import argparse
import csv
import enum
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


class OutputFormat(enum.Enum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    NL = "nl"


def add_output_options(
    p: argparse.ArgumentParser, *, json_help: str = "a JSON array of objects (the default in a pipe)"
) -> None:
    """Add ``--table/--json/--csv/--nl`` (mutually exclusive) to a subcommand."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--table",
        dest="output",
        action="store_const",
        const=OutputFormat.TABLE,
        help="aligned table (the default on a terminal)",
    )
    g.add_argument(
        "--json",
        dest="output",
        action="store_const",
        const=OutputFormat.JSON,
        help=json_help,
    )
    g.add_argument("--csv", dest="output", action="store_const", const=OutputFormat.CSV, help="CSV with a header row")
    g.add_argument("--nl", dest="output", action="store_const", const=OutputFormat.NL, help="one JSON object per line")


def chosen_format(chosen: OutputFormat | None, out: TextIO) -> OutputFormat:
    """The explicit choice, else a table on a terminal and JSON in a pipe."""
    if chosen is not None:
        return chosen
    isatty = getattr(out, "isatty", None)
    return OutputFormat.TABLE if isatty is not None and isatty() else OutputFormat.JSON


def plain(value: Any) -> Any:
    """A JSON-safe value: blobs become hex text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return value


def unique_columns(columns: Sequence[str]) -> list[str]:
    """Column names made unique (``a``, ``a_2``) so every value keeps its key in JSON."""
    seen: dict[str, int] = {}
    out = []
    for c in columns:
        n = seen.get(c, 0) + 1
        seen[c] = n
        out.append(c if n == 1 else f"{c}_{n}")
    return out


def write_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]], fmt: OutputFormat, out: TextIO) -> int:
    """Write ``rows`` in ``fmt`` to ``out``; returns how many rows were written."""
    keys = unique_columns(columns)
    n = 0
    if fmt is OutputFormat.JSON:
        out.write("[")
        for row in rows:
            out.write(",\n " if n else "\n ")
            out.write(json.dumps(dict(zip(keys, map(plain, row), strict=False)), ensure_ascii=False))
            n += 1
        out.write("\n]\n" if n else "]\n")
    elif fmt is OutputFormat.NL:
        for row in rows:
            out.write(json.dumps(dict(zip(keys, map(plain, row), strict=False)), ensure_ascii=False) + "\n")
            n += 1
    elif fmt is OutputFormat.CSV:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow([plain(v) for v in row])
            n += 1
    else:
        n = write_table(columns, rows, out)
    return n


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        # fixed point (no exponent) for the durations and rates users look at
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) >= 1e-3 or value == 0 else f"{value:.3g}"
    return str(plain(value))


def write_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO) -> int:
    """An aligned table: numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [True] * len(columns)
    widths = [len(c) for c in columns]
    for row_cells in cells:
        for i, text in enumerate(row_cells):
            widths[i] = max(widths[i], len(text))
            if text and numeric[i]:
                numeric[i] = _is_number(text)
    header = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)).rstrip()
    out.write(header + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for row_cells in cells:
        line = "  ".join(
            t.rjust(w) if numeric[i] else t.ljust(w) for i, (t, w) in enumerate(zip(row_cells, widths, strict=False))
        )
        out.write(line.rstrip() + "\n")
    return len(cells)


# A number, optionally with thousands separators and a unit: 1,234  2.5 ms  3.00x  500.1/s
_NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s*(ns|µs|us|ms|s|x|/s|%|B|KiB|MiB|GiB|TiB)?$", re.IGNORECASE)


def _is_number(text: str) -> bool:
    return _NUMBER.match(text) is not None
