"""Shared row output: aligned table, JSON, CSV, newline-delimited JSON.

Every row-printing command takes the same options (``add_output_options``),
limited to the formats it can print. Machine formats write only data to
stdout and stream row by row; the table buffers rows to align columns.
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


_HELP = {
    OutputFormat.TABLE: "aligned table",
    OutputFormat.JSON: "a JSON array of objects",
    OutputFormat.CSV: "CSV with a header row",
    OutputFormat.NL: "one JSON object per line",
}


def add_output_options(
    p: argparse.ArgumentParser,
    *,
    formats: Sequence[OutputFormat] = tuple(OutputFormat),
    in_pipe: OutputFormat = OutputFormat.JSON,
    table_help: str | None = None,
    json_help: str | None = None,
) -> None:
    """Add one flag per format (``--table/--json/--csv/--nl``, mutually exclusive) to a subcommand.

    Args:
        formats: the formats the command can print (the table is the default on a terminal).
        in_pipe: the default when stdout is not a terminal; pass the same to ``chosen_format``.
        table_help, json_help: what the table or the JSON is, when not rows.
    """
    helps = {**_HELP}
    if table_help:
        helps[OutputFormat.TABLE] = table_help
    if json_help:
        helps[OutputFormat.JSON] = json_help
    g = p.add_mutually_exclusive_group()
    for fmt in formats:
        help_text = helps[fmt] + _default_note(fmt, in_pipe)
        g.add_argument(f"--{fmt.value}", dest="output", action="store_const", const=fmt, help=help_text)
    p.set_defaults(output=None)


def _default_note(fmt: OutputFormat, in_pipe: OutputFormat) -> str:
    if fmt is OutputFormat.TABLE:
        return " (the default)" if in_pipe is OutputFormat.TABLE else " (the default on a terminal)"
    return " (the default in a pipe)" if fmt is in_pipe else ""


def chosen_format(
    chosen: OutputFormat | None, out: TextIO, *, in_pipe: OutputFormat = OutputFormat.JSON
) -> OutputFormat:
    """Pick the explicit choice, else a table on a terminal and ``in_pipe`` elsewhere."""
    if chosen is not None:
        return chosen
    isatty = getattr(out, "isatty", None)
    return OutputFormat.TABLE if isatty is not None and isatty() else in_pipe


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
