"""Shared row output: aligned table, JSON, CSV, newline-delimited JSON.

Every row-printing command takes the same options (``add_output_options``),
limited to the formats it can print. The table is the default everywhere, in
a pipe too: which format a command prints never depends on where its stdout
goes (``gpuscope query ... | less`` shows what the terminal shows), and the
machine formats are chosen by name. Machine formats write only data to
stdout and stream row by row; the table aligns its columns on its first rows
and streams the rest (``write_table``), so no format holds a whole result.

Commands that write a file rather than rows (``merge``, ``import``,
``export``) take ``--json`` alone (``add_json_summary_option``): one JSON
object describing what was written, instead of the lines for people.
"""

from __future__ import annotations

import argparse
import csv
import enum
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

from gpuscope.config import expand_home
from gpuscope.model.printable import json_printable, printable


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

RowCells = Callable[[Sequence[Any]], list[str]]
"""Turns one row into its table cells (``gpuscope.query.humanize`` makes readable ones)."""


def add_output_options(
    p: argparse.ArgumentParser,
    *,
    formats: Sequence[OutputFormat] = tuple(OutputFormat),
    table_help: str | None = None,
    json_help: str | None = None,
) -> None:
    """Add one flag per format (``--table/--json/--csv/--nl``, mutually exclusive) to a subcommand.

    Args:
        formats: the formats the command can print; the table is the default, on a terminal or not.
        table_help, json_help: what the table or the JSON is, when not rows.
    """
    helps = {**_HELP}
    if table_help:
        helps[OutputFormat.TABLE] = table_help
    if json_help:
        helps[OutputFormat.JSON] = json_help
    g = p.add_mutually_exclusive_group()
    for fmt in formats:
        help_text = helps[fmt] + (" (the default)" if fmt is OutputFormat.TABLE else "")
        g.add_argument(f"--{fmt.value}", dest="output", action="store_const", const=fmt, help=help_text)
    p.set_defaults(output=None)


def chosen_format(chosen: OutputFormat | None) -> OutputFormat:
    """Pick the explicit choice, else the table: the same on a terminal and in a pipe (``| less`` is read by a person)."""
    return chosen if chosen is not None else OutputFormat.TABLE


def add_json_summary_option(p: argparse.ArgumentParser, *, what: str, limit: str | None = None) -> None:
    """Add ``--json`` (``args.json``) to a command that writes a file.

    ``what`` says what the object describes; ``limit``, when the flag cannot always be used.
    """
    text = f"print one JSON object describing {what} on stdout instead of the summary lines"
    p.add_argument("--json", action="store_true", help=text + (f" ({limit})" if limit else ""))


def absolute_path(path: str) -> str:
    """``path`` made absolute for a JSON summary, links not followed (the name the user gave, from ``/``)."""
    return os.path.abspath(expand_home(path))


def write_json_summary(doc: Mapping[str, Any], out: TextIO) -> None:
    """Write ``doc`` as one indented JSON object and a newline: the only thing on stdout with ``--json``."""
    out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


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


def write_rows(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    fmt: OutputFormat,
    out: TextIO,
    *,
    table_cells: RowCells | None = None,
) -> int:
    """Write ``rows`` in ``fmt`` to ``out``; returns how many rows were written.

    ``table_cells`` turns a row into the table's cells (default: each value as stored, ``cell_text``);
    JSON and newline-delimited JSON always carry the values as stored, CSV too but for control characters.
    No format writes a control character raw (``gpuscope.model.printable``): JSON escapes them its own way
    (the values are unchanged), CSV and the table write the escape (``\\x1b``) as text.
    """
    keys = unique_columns(columns)
    n = 0
    if fmt is OutputFormat.JSON:
        out.write("[")
        for row in rows:
            out.write(",\n " if n else "\n ")
            out.write(json_printable(json.dumps(dict(zip(keys, map(plain, row), strict=False)), ensure_ascii=False)))
            n += 1
        out.write("\n]\n" if n else "]\n")
    elif fmt is OutputFormat.NL:
        for row in rows:
            line = json.dumps(dict(zip(keys, map(plain, row), strict=False)), ensure_ascii=False)
            out.write(json_printable(line) + "\n")
            n += 1
    elif fmt is OutputFormat.CSV:
        w = csv.writer(out, lineterminator="\n")
        w.writerow([_csv_field(c) for c in columns])
        for row in rows:
            w.writerow([_csv_field(plain(v)) for v in row])
            n += 1
    else:
        n = write_table(columns, rows, out, cells=table_cells)
    return n


def _csv_field(value: Any) -> Any:
    """A CSV field: text with its control characters escaped (tab and newline stay: CSV quotes them)."""
    return printable(value, keep_lines=True) if isinstance(value, str) else value


def cell_text(value: Any) -> str:
    """One value as a table cell: blobs as hex, floats in fixed point, NULL empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        # fixed point (no exponent) for the durations and rates users look at
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) >= 1e-3 or value == 0 else f"{value:.3g}"
    return str(plain(value))


def _row_text(row: Sequence[Any]) -> list[str]:
    return [cell_text(v) for v in row]


# The table's column widths come from its first rows; the rest stream in their widths. Both bounds hold:
# rows of a few long values reach the size long before the count.
TABLE_HEAD_ROWS = 1000
TABLE_HEAD_CHARS = 1 << 20


def write_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO, *, cells: RowCells | None = None
) -> int:
    """An aligned table: numbers right-aligned, text left-aligned; ``cells`` formats a row (see ``write_rows``).

    A control character in a cell or a column name is written as its escape
    (``printable``): no cell moves the cursor or reorders text, each row is one line.
    Widths and alignment are read from the first ``TABLE_HEAD_ROWS`` rows (or
    ``TABLE_HEAD_CHARS`` of cell text, whichever comes first), so a result of
    any size is written in bounded memory, row by row after them; a longer cell
    further down widens its own line only (as psql's ``FETCH_COUNT`` does).
    """
    given_cells = cells or _row_text

    def row_cells(row: Sequence[Any]) -> list[str]:
        # Cells hold the traced programs' text: a control character is shown as its escape, never obeyed.
        return [printable(text) for text in given_cells(row)]

    columns = [printable(c) for c in columns]
    remaining = iter(rows)
    head: list[list[str]] = []
    chars = 0
    for row in remaining:
        texts = row_cells(row)
        head.append(texts)
        chars += sum(map(len, texts))
        if len(head) >= TABLE_HEAD_ROWS or chars >= TABLE_HEAD_CHARS:
            break
    numeric = [True] * len(columns)
    widths = [len(c) for c in columns]
    for texts in head:
        for i, text in enumerate(texts):
            widths[i] = max(widths[i], len(text))
            if text and numeric[i]:
                numeric[i] = _is_number(text)
    header = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)).rstrip()
    out.write(header + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")

    def line(texts: list[str]) -> str:
        cells_ = (t.rjust(w) if numeric[i] else t.ljust(w) for i, (t, w) in enumerate(zip(texts, widths, strict=False)))
        return "  ".join(cells_).rstrip() + "\n"

    for texts in head:
        out.write(line(texts))
    n = len(head)
    del head  # the rest streams: only one row at a time is held
    for row in remaining:
        out.write(line(row_cells(row)))
        n += 1
    return n


# A number, optionally with thousands separators and a unit: 1,234  2.5 ms  3.00x  500.1/s
_NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s*(ns|µs|us|ms|s|x|/s|%|B|KiB|MiB|GiB|TiB)?$", re.IGNORECASE)


def _is_number(text: str) -> bool:
    return _NUMBER.match(text) is not None
