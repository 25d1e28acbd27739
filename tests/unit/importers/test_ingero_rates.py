"""Rates of reference recordings: stored rows are selective, so rates come from the file's own counts or none."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gpuscope.analysis.engine import ExplainOptions, Report, explain_db
from gpuscope.importers import import_file
from tests.unit.importers.reference_schema import LEGACY_TABLES

S = 1_000_000_000
T0 = 1_775_000_000 * S  # Unix ns, as the reference records
PID = 7


def _reference_file(
    path: Path,
    per_second: list[int],
    *,
    aggregates: bool,
    stored_extra: dict[int, int] | None = None,
    keep_all_s: int = 10,
) -> Path:
    """A reference (v0.8-style) file: cudaLaunchKernel calls at ``per_second[i]`` a second in second i, every
    row stored for the first ``keep_all_s`` (its store-all window) and 1 in 100 after, with exact 5 s counts if
    asked (``stored_extra``: bucket index -> how many calls its count falls short of)."""
    c = sqlite3.connect(path)
    c.executescript(
        LEGACY_TABLES
        + """
        CREATE TABLE event_aggregates_5s (bucket INTEGER NOT NULL, source INTEGER NOT NULL, op INTEGER NOT NULL,
            pid INTEGER NOT NULL DEFAULT 0, count INTEGER NOT NULL DEFAULT 0, stored INTEGER NOT NULL DEFAULT 0,
            sum_dur INTEGER NOT NULL DEFAULT 0, min_dur INTEGER NOT NULL DEFAULT 0, max_dur INTEGER NOT NULL DEFAULT 0,
            sum_arg0 INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (bucket, source, op, pid));
        """
    )
    c.execute(
        "INSERT INTO sessions(started_at, stopped_at, ingero_ver) VALUES (?, ?, '0.8.1')",
        (T0, T0 + len(per_second) * S),
    )
    rows: list[tuple[int, ...]] = []
    counts: dict[int, int] = {}
    stored: dict[int, int] = {}
    for sec, n in enumerate(per_second):
        for k in range(n):
            ts = T0 + sec * S + k * (S // n)
            bucket = T0 + (sec // 5) * 5 * S
            counts[bucket] = counts.get(bucket, 0) + 1
            if sec < keep_all_s or k % 100 == 0:
                rows.append((ts, PID, PID, 1, 3, 5000))
                stored[bucket] = stored.get(bucket, 0) + 1
    c.executemany("INSERT INTO events(timestamp, pid, tid, source, op, duration) VALUES (?, ?, ?, ?, ?, ?)", rows)
    if aggregates:
        for bucket, n in counts.items():
            n = min(n, n - (stored_extra or {}).get((bucket - T0) // (5 * S), 0))
            c.execute(
                "INSERT INTO event_aggregates_5s(bucket, source, op, pid, count, stored, sum_dur, min_dur, max_dur) "
                "VALUES (?, 1, 3, ?, ?, ?, ?, 5000, 5000)",
                (bucket, PID, n, stored[bucket], n * 5000),
            )
    c.commit()
    c.close()
    return path


def _explain(tmp_path: Path, src: Path) -> Report:
    ours = tmp_path / f"{src.stem}-ours.db"
    import_file(src, ours)
    return explain_db(ours, ExplainOptions())


def test_the_end_of_the_store_all_window_is_not_a_throughput_drop(tmp_path: Path) -> None:
    # given a steady 1,000 launches a second for a minute, rows kept 1 in 100 after the first 10 s
    report = _explain(tmp_path, _reference_file(tmp_path / "steady.db", [1000] * 60, aggregates=True))
    assert "throughput-drop" not in [f.kind for f in report.findings]


def test_a_real_drop_is_read_from_the_files_own_counts(tmp_path: Path) -> None:
    # given 1,000 launches a second for 30 s, then 300 a second
    report = _explain(tmp_path, _reference_file(tmp_path / "drop.db", [1000] * 30 + [300] * 30, aggregates=True))
    f = next(f for f in report.findings if f.kind == "throughput-drop")
    assert f.causes[0].metrics["peak_per_s"] == 1000 and f.causes[0].metrics["low_per_s"] == 300


def test_without_the_files_counts_rates_are_unavailable_not_a_drop(tmp_path: Path) -> None:
    report = _explain(tmp_path, _reference_file(tmp_path / "bare.db", [1000] * 60, aggregates=False))
    assert "throughput-drop" not in [f.kind for f in report.findings]
    assert any("rates unavailable" in n for n in report.notes)


def test_a_bucket_counting_fewer_calls_than_its_stored_rows_takes_the_rows(tmp_path: Path) -> None:
    # given three buckets whose counts fall 4,000 short of their 5,000 stored rows (as seen in real files)
    short = {3: 4000, 4: 4000, 5: 4000}
    src = _reference_file(tmp_path / "short.db", [1000] * 60, aggregates=True, stored_extra=short, keep_all_s=30)
    assert "throughput-drop" not in [f.kind for f in _explain(tmp_path, src).findings]


def test_the_summary_counts_the_calls_the_file_counted_not_only_the_rows_it_kept(tmp_path: Path) -> None:
    # given 60,000 launches of which the file kept 10,500 rows
    report = _explain(tmp_path, _reference_file(tmp_path / "count.db", [1000] * 60, aggregates=True))
    (row,) = [s for s in report.stats if s.op == "cudaLaunchKernel"]
    (mine,) = [s for s in report.per_process if s.op == "cudaLaunchKernel"]
    assert row.count == mine.count == 60_000
    assert row.total_ns == 60_000 * 5000
    assert 990 < row.rate_per_s < 1010
    assert any("percentiles from the rows it stored" in n for n in report.notes)
