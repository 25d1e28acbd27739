"""explain_bench's generated recordings: the rows and the aggregates written beside them count the same events."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))  # explain_bench imports benchlib beside it
    try:
        spec = importlib.util.spec_from_file_location("explain_bench", ROOT / "bench" / "explain_bench.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


@pytest.mark.parametrize("mix", ["hard", "training"])
def test_aggregates_count_every_generated_row(bench: ModuleType, tmp_path: Path, mix: str) -> None:
    db = tmp_path / f"{mix}.db"
    bench.generate(db, 23_457, mix=mix)  # not a whole number of steps or seconds
    conn = sqlite3.connect(db)
    try:
        by_rows = conn.execute(
            "SELECT pid, op_id, count(*), sum(duration_ns), max(duration_ns), sum(bytes) FROM event_log "
            "GROUP BY pid, op_id ORDER BY pid, op_id"
        ).fetchall()
        by_aggregates = conn.execute(
            "SELECT pid, op_id, sum(count), sum(sum_duration_ns), max(max_duration_ns), sum(sum_bytes) "
            "FROM event_aggregates GROUP BY pid, op_id ORDER BY pid, op_id"
        ).fetchall()
        names = {r[0] for r in conn.execute("SELECT o.name FROM event_log e JOIN ops o ON o.id = e.op_id")}
    finally:
        conn.close()
    assert by_rows == by_aggregates
    assert sum(r[2] for r in by_rows) == 23_457 and len({r[0] for r in by_rows}) == 2  # two processes
    if mix == "training":
        assert {"cudaLaunchKernel", "cuLaunchKernelEx", "cuMemsetD8Async", "cudaStreamSynchronize"} <= names
