"""The frame's parts are written on a second thread: in order, completely, and their errors are the caller's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from gpuscope.analysis import frame
from gpuscope.store.events_read import FRAME_ROW_WIDTH


class _Part:
    def __init__(self, first: int, rows: int, fail: bool = False, slow: float = 0.0) -> None:
        self.first, self.rows, self.fail, self.slow = first, rows, fail, slow
        self.thread: str | None = None
        self.done = False

    def write(self, dest: list[np.ndarray]) -> None:
        self.thread = threading.current_thread().name
        time.sleep(self.slow)
        if self.fail:
            raise RuntimeError("a part that cannot be written")
        for j, col in enumerate(dest):
            col[:] = np.arange(self.first, self.first + len(col)) * (j + 1)
        self.done = True


def test_parts_are_written_end_to_end_off_the_reading_thread() -> None:
    parts = [_Part(0, 5), _Part(5, 3), _Part(8, 4)]
    raw = frame._gather(iter(parts), cap=10)  # the last part is cut at the bound
    assert len(raw) == FRAME_ROW_WIDTH
    for j, col in enumerate(raw):
        assert col.tolist() == [i * (j + 1) for i in range(10)]
    assert {p.thread for p in parts} == {"gpuscope-frame"}


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
