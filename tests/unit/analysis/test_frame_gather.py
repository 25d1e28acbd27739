"""The frame: its parts written on a second thread (in order, completely, their errors the caller's), its ids narrow."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpuscope.analysis import frame
from gpuscope.analysis.frame import load_frame
from gpuscope.model.ops import Op
from gpuscope.store.blocks import build_blocks
from gpuscope.store.events_read import FRAME_FIELDS, FrameSink
from tests.unit.analysis.builder import Events


class _Part:
    def __init__(self, first: int, rows: int, fail: bool = False, slow: float = 0.0, big: int = 0) -> None:
        self.first, self.rows, self.fail, self.slow, self.big = first, rows, fail, slow, big
        self.thread: str | None = None
        self.done = False

    def write(self, sink: FrameSink) -> None:
        self.thread = threading.current_thread().name
        time.sleep(self.slow)
        if self.fail:
            raise RuntimeError("a part that cannot be written")
        for j in range(len(FRAME_FIELDS)):
            big = 0 if FRAME_FIELDS[j] in ("pid", "op") else self.big  # ids come masked to their bits
            sink.put(j, np.arange(self.first, self.first + sink.rows) * (j + 1) + big)
        self.done = True


def test_parts_are_written_end_to_end_off_the_reading_thread() -> None:
    parts = [_Part(0, 5), _Part(5, 3), _Part(8, 4)]
    cols = frame._gather(iter(parts), cap=10)  # the last part is cut at the bound
    assert len(cols) == len(FRAME_FIELDS)
    for j, col in enumerate(cols):
        assert col.tolist() == [i * (j + 1) for i in range(10)]
    assert {p.thread for p in parts} == {"gpuscope-frame"}
    assert [c.dtype.itemsize for c in cols] == [8, 8, 4, 4, 2, 4, 4, 8, 4, 4, 4]


def test_a_column_a_later_part_does_not_fit_is_widened_with_the_rows_before_it_kept() -> None:
    # given a second part whose values need 64 bits
    parts = [_Part(0, 3), _Part(3, 2, big=1 << 40)]
    # when
    cols = frame._gather(iter(parts), cap=10)
    # then every column but the ids is 64 bits wide, with the first part's rows kept
    for j, col in enumerate(cols):
        big = 0 if FRAME_FIELDS[j] in ("pid", "op") else 1 << 40
        assert col.tolist() == [i * (j + 1) + (big if i >= 3 else 0) for i in range(5)], FRAME_FIELDS[j]
    assert [c.dtype.itemsize for c in cols] == [8, 8, 4, 8, 2, 8, 8, 8, 8, 8, 8]


def test_a_part_that_fails_to_write_fails_the_gather() -> None:
    with pytest.raises(RuntimeError, match="cannot be written"):
        frame._gather(iter([_Part(0, 5), _Part(5, 3, fail=True), _Part(8, 2)]), cap=20)


def test_a_reading_error_waits_for_the_write_in_flight() -> None:
    written = _Part(0, 5, slow=0.3)

    def parts() -> Iterator[_Part]:
        yield written
        raise ValueError("a block that does not decode")

    with pytest.raises(ValueError, match="does not decode"):
        frame._gather(parts(), cap=20)
    assert written.done  # finished before the error reached the caller (who reads rows instead, into new arrays)


@pytest.mark.parametrize("blocks", [True, False])
def test_columns_are_kept_narrow_and_a_value_too_wide_for_int32_keeps_its_own(tmp_path: Path, blocks: bool) -> None:
    ev = Events()
    ev.add(Op.cudaStreamSynchronize, 1000, 50, pid=100, tid=100)
    ev.add(Op.cudaStreamSynchronize, 2000, 50, pid=100, tid=101)
    narrow = ev.to_db(tmp_path / "narrow.db")
    ev.add(Op.cudaStreamSynchronize, 3000, 50, pid=100, tid=(1 << 32) + 5)  # not a Linux tid: a file's value
    ev.add(Op.cudaMalloc, 4000, 50, pid=100, nbytes=1 << 40, handle=7)  # a 1 TiB allocation
    wide = ev.to_db(tmp_path / "wide.db")
    for path in (narrow, wide):
        if blocks:
            conn = sqlite3.connect(path)
            build_blocks(conn)
            conn.commit()
            conn.close()
    conn = sqlite3.connect(f"file:{narrow}?mode=ro", uri=True)
    f = load_frame(conn, 0, 10_000)
    conn.close()
    i16, i32, i64 = np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64)
    assert (f.pid.dtype, f.tid.dtype, f.op.dtype) == (i32, i32, i16)
    assert (f.bytes.dtype, f.cgroup.dtype, f.handle.dtype) == (i32, i32, i64)
    assert f.tid.tolist() == [100, 101] and f.op.tolist() == [int(Op.cudaStreamSynchronize)] * 2
    conn = sqlite3.connect(f"file:{wide}?mode=ro", uri=True)
    f = load_frame(conn, 0, 10_000)
    conn.close()
    assert f.tid.dtype == np.int64 and f.tid.tolist() == [100, 101, (1 << 32) + 5, 100]
    assert f.bytes.dtype == np.int64 and f.bytes.tolist()[-1] == 1 << 40
