"""Column blocks: what the writer, retention and hand edits leave, and that explain's frame is the same from them."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import TypedDict

import numpy as np
import pytest

import gpuscope.store.blocks_read as blocks_read
import gpuscope.store.writer as writer_module
from gpuscope.analysis.frame import _FIELDS, EventFrame, load_frame
from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.model.ops import Op
from gpuscope.recording.merge_formats import merge_recordings
from gpuscope.store.blocks import BLOCK_COLUMNS, BlockError, build_blocks, decode_block, encode_block
from gpuscope.store.blocks_read import block_coverage
from gpuscope.store.connect import connect_writer
from gpuscope.store.retention import Usage, delete_oldest, usage
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import Durability, EventWriter
from tests.unit.store.recordings import without_blocks

_OPS = np.array(
    [int(o) for o in (Op.cudaLaunchKernel, Op.cuLaunchKernel, Op.cudaMemcpyAsync, Op.cudaStreamSynchronize)]
    + [int(o) for o in (Op.cudaMalloc, Op.cudaFree, Op.sched_switch, Op.sched_wakeup, Op.block_io)]
)
_LAUNCH, _COPY = int(Op.cudaLaunchKernel), int(Op.cudaMemcpyAsync)
_EVERYTHING = (0, 2**62)


def _batch(rng: np.random.Generator, n: int, t0: int) -> np.ndarray:
    """n events of a few processes and every kind the frame treats apart, partly out of time order."""
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["ts_ns"] = t0 + np.sort(rng.integers(0, 10_000_000, n))
    ev["ts_ns"][: n // 8] = ev["ts_ns"][: n // 8][::-1]  # CPUs' ring batches interleave
    ev["duration_ns"] = rng.integers(0, 300_000, n)
    ev["pid"] = rng.choice([10, 11, 12], n)
    ev["tid"] = ev["pid"] * 10 + rng.integers(0, 3, n)
    ev["op"] = rng.choice(_OPS, n)
    ev["cgroup_id"] = rng.choice([1, 5, 6], n)
    ev["bytes"] = rng.integers(0, 1 << 30, n)
    ev["handle"] = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)  # pointers above 2**63 are stored negative
    ev["stream"] = rng.integers(0, 5, n)
    ev["arg0"] = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)
    ev["arg1"] = rng.integers(0, 3, n)
    ev["comm"] = b"train.py"
    return ev


def _record(path: Path, batches: int = 40, seed: int = 1, durability: Durability | None = None) -> Path:
    rng = np.random.default_rng(seed)
    conn = connect_writer(path)
    info = SessionInfo(f"u-{seed}", f"node-{seed}", "host", "6.8", "0.1", "1.4", 10**18, 1_000, [], {})
    sid = create_session(conn, info)
    w = EventWriter(conn, sid, durability=durability)
    for b in range(batches):
        w.put(_batch(rng, int(rng.integers(1, 1500)), 1_000 + b * 10_000_000))
    w.close()
    conn.close()
    return path


class _FrameArgs(TypedDict, total=False):
    """What a case passes to ``_frame`` besides the path."""

    window: tuple[int, int]
    pids: tuple[int, ...]
    thin: dict[tuple[int, int], int]


def _frame(
    path: Path,
    window: tuple[int, int] = _EVERYTHING,
    pids: tuple[int, ...] = (),
    thin: dict[tuple[int, int], int] | None = None,
) -> EventFrame:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return load_frame(conn, *window, pids=pids, thin=thin)
    finally:
        conn.close()


def _same(a: EventFrame, b: EventFrame) -> bool:
    return len(a) == len(b) and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in _FIELDS)


# Thinned (pid, op): all of the launches and copies of two processes, none slow enough to be kept for it,
# so that which row begins a run decides; the third process's slow ones; its copies not at all.
_THIN = {(p, o): 10**9 for p in (10, 11) for o in (_LAUNCH, _COPY, int(Op.cuLaunchKernel))}
_THIN |= {(12, _LAUNCH): 200_000, (12, int(Op.cuLaunchKernel)): 0}
# One thinned process, as a recording of one job usually has (thresholds looked up by op, not searched).
_THIN_ONE = {(11, _LAUNCH): 200_000, (11, int(Op.cuLaunchKernel)): 0, (11, _COPY): 10**9}
_CASES = [
    pytest.param({}, id="everything"),
    pytest.param({"window": (120_000_000, 260_000_000)}, id="a window"),
    pytest.param({"pids": (10,)}, id="one process"),
    pytest.param({"thin": _THIN}, id="thinned"),
    pytest.param({"thin": _THIN_ONE}, id="one process thinned"),
    pytest.param({"window": (120_000_000, 260_000_000), "thin": _THIN}, id="thinned window"),
    pytest.param({"window": (50_000_000, 300_000_000), "pids": (11,), "thin": _THIN}, id="all filters"),
]


def _blocks(path: Path) -> list[tuple[int, int]]:
    conn = sqlite3.connect(path)
    try:
        return [(int(a), int(b)) for a, b in conn.execute("SELECT first_id, rows FROM event_blocks ORDER BY first_id")]
    finally:
        conn.close()


def _ids(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        lo, hi = conn.execute("SELECT min(id), max(id) FROM event_log").fetchone()
        return int(lo), int(hi)
    finally:
        conn.close()


def _tiles(blocks: list[tuple[int, int]], lo: int, hi: int) -> bool:
    """The blocks hold exactly the ids lo..hi, each once."""
    want = lo
    for first, rows in blocks:
        if first != want:
            return False
        want = first + rows
    return want == hi + 1


def test_a_block_gives_back_every_value_it_was_given() -> None:
    # given columns with constant ones, the extremes of int64, and values whose range needs all 64 bits
    rng = np.random.default_rng(3)
    n = 1000
    cols = np.zeros((n, len(BLOCK_COLUMNS)), dtype=np.int64)
    cols[:, 0] = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    cols[:, 1] = 7
    cols[:2, 2] = [-(2**63), 2**63 - 1]
    cols[:, 3] = rng.integers(0, 300, n)
    cols[:, 4] = rng.integers(-70_000, 70_000, n)
    cols[:, 5] = rng.integers(0, 2**31, n)
    # when encoded and decoded
    out = decode_block(encode_block(cols), n)
    # then each column is as it was
    for j in range(len(BLOCK_COLUMNS)):
        assert np.array_equal(out[j], cols[:, j]), BLOCK_COLUMNS[j]


@pytest.mark.parametrize(
    "blob", [b"", b"\x01", encode_block(np.ones((4, len(BLOCK_COLUMNS)), dtype=np.int64))[:-1], "text"]
)
def test_a_blob_gpuscope_did_not_write_is_refused(blob: object) -> None:
    with pytest.raises(BlockError):
        decode_block(blob, 4)


def test_the_writers_blocks_hold_every_row_as_stored(tmp_path: Path) -> None:
    # given a recording made by the writer, with blocks smaller than a batch so that batches span them
    path = _record(tmp_path / "r.db", durability=Durability(rows_per_commit=700))
    blocks = _blocks(path)
    # then its blocks hold every row once, none bigger than a transaction's rows
    assert _tiles(blocks, *_ids(path)) and max(r for _, r in blocks) <= 700 + 1500
    # and each block's values are those of its rows
    conn = sqlite3.connect(path)
    for first, rows, blob in conn.execute("SELECT first_id, rows, columns FROM event_blocks LIMIT 5"):
        stored = np.array(
            conn.execute(
                f"SELECT {', '.join(BLOCK_COLUMNS)} FROM event_log WHERE id BETWEEN ? AND ? ORDER BY id",
                (first, first + rows - 1),
            ).fetchall(),
            dtype=np.int64,
        )
        assert np.array_equal(np.stack(decode_block(blob, rows), axis=1), stored)
    conn.close()


@pytest.mark.parametrize("kw", _CASES)
@pytest.mark.parametrize(("block_rows", "group_rows"), [(1, 1 << 20), (600, 1 << 20), (65_536, 1 << 20), (600, 1_000)])
def test_the_frame_from_blocks_is_the_frame_from_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_rows: int, group_rows: int, kw: _FrameArgs
) -> None:
    # given recordings whose blocks are one batch each, a few hundred rows, or the default size,
    # read all at once or a few blocks at a time
    monkeypatch.setattr(writer_module, "BLOCK_ROWS", block_rows)
    monkeypatch.setattr(blocks_read, "GROUP_ROWS", group_rows)
    path = _record(tmp_path / "r.db")
    assert block_coverage(sqlite3.connect(path)) is not None
    # then explain's frame is the same, value for value, read from blocks or from rows
    a, b = _frame(path, **kw), _frame(without_blocks(path), **kw)
    assert len(a) > 100 and _same(a, b)


def test_retention_trims_the_block_it_cuts_through(tmp_path: Path) -> None:
    # given a recording whose oldest rows are deleted to stay under a size cap, mid-block
    path = _record(tmp_path / "r.db", durability=Durability(rows_per_commit=5_000))
    written = {first for first, _ in _blocks(path)}
    conn = connect_writer(path)
    live: Usage = usage(conn, path)
    deleted = delete_oldest(conn, live.live_pages * live.page_size // 3, live)
    conn.close()
    blocks = _blocks(path)
    assert deleted > 0 and blocks[0][0] not in written  # the cut fell inside a block, which was rewritten
    # then the blocks still hold exactly the rows left, and the frame is the rows' frame
    assert _tiles(blocks, *_ids(path))
    assert _same(_frame(path, thin=_THIN), _frame(without_blocks(path), thin=_THIN))


@pytest.mark.parametrize(
    "edit",
    [
        "DELETE FROM event_log WHERE id = (SELECT min(id) + 1000 FROM event_log)",
        "UPDATE event_log SET duration_ns = 99000000 WHERE id = (SELECT min(id) + 2000 FROM event_log)",
        "UPDATE event_log SET op_id = 3 WHERE id = (SELECT max(id) - 5 FROM event_log)",
    ],
)
def test_rows_edited_by_hand_are_read_as_rows(tmp_path: Path, edit: str) -> None:
    # given a recording one of whose rows was deleted or changed outside gpuscope
    path = _record(tmp_path / "r.db", durability=Durability(rows_per_commit=2_000))
    before = len(_blocks(path))
    conn = sqlite3.connect(path)
    conn.execute(edit)
    conn.commit()
    conn.close()
    # then that row's block is gone, and the frame reads what the rows now say
    assert len(_blocks(path)) == before - 1
    assert _same(_frame(path, thin=_THIN), _frame(without_blocks(path), thin=_THIN))


def test_rows_before_and_after_the_blocks_are_read_as_rows(tmp_path: Path) -> None:
    # given a recording whose first rows were written without blocks (an older gpuscope, a merge)
    # and whose last rows have none yet (the writer was killed before it wrote their block)
    path = _record(tmp_path / "r.db", durability=Durability(rows_per_commit=3_000))
    conn = sqlite3.connect(path)
    blocks = _blocks(path)
    conn.execute("DELETE FROM event_blocks WHERE first_id IN (?, ?)", (blocks[0][0], blocks[-1][0]))
    conn.commit()
    coverage = block_coverage(conn)
    conn.close()
    assert coverage is not None and [run is None for _, _, run in coverage.spans()] == [True, False, True]
    # then every row is in the frame, each read once
    assert _same(_frame(path, thin=_THIN), _frame(without_blocks(path), thin=_THIN))


def test_a_damaged_block_makes_the_frame_read_rows(tmp_path: Path) -> None:
    # given a block whose blob is not one gpuscope wrote
    path = _record(tmp_path / "r.db", durability=Durability(rows_per_commit=3_000))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE event_blocks SET columns = x'0102' WHERE first_id = (SELECT max(first_id) FROM event_blocks)")
    conn.commit()
    conn.close()
    # then the frame is read from the rows, whole
    assert _same(_frame(path), _frame(without_blocks(path)))


def test_blocks_built_for_rows_written_without_them_give_the_same_frame(tmp_path: Path) -> None:
    # given a recording whose rows have no blocks, and blocks built for it afterwards
    rows = without_blocks(_record(tmp_path / "r.db"))
    built = tmp_path / "built.db"
    shutil.copy(rows, built)
    conn = connect_writer(built)
    conn.execute("BEGIN")
    covered = build_blocks(conn)
    conn.execute("COMMIT")
    conn.close()
    # then they hold every row, and the frame is the same
    assert covered == _ids(built)[1] - _ids(built)[0] + 1 and _tiles(_blocks(built), *_ids(built))
    assert _same(_frame(built, thin=_THIN), _frame(rows, thin=_THIN))


def test_a_merged_recording_has_blocks_of_its_own(tmp_path: Path) -> None:
    # given two recordings with blocks merged into a new file, where the second one's ids are renumbered
    first = _record(tmp_path / "a.db", seed=1)
    second = _record(tmp_path / "b.db", seed=2)
    merged = tmp_path / "m.db"
    merge_recordings([first, second], merged)
    # then the output's blocks hold every row of it, and the frame is the one its rows give
    assert _tiles(_blocks(merged), *_ids(merged))
    assert _same(_frame(merged, thin=_THIN), _frame(without_blocks(merged), thin=_THIN))
    # and it has both inputs' rows, and the time index a closed recording has
    assert len(_frame(merged)) == len(_frame(first)) + len(_frame(second))
    conn = sqlite3.connect(merged)
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'event_log_ts'").fetchone() is not None
    conn.close()


def test_runs_of_blocks_apart_read_the_rows_between_them(tmp_path: Path) -> None:
    # given blocks in three runs (two blocks dropped by hand edits) with rows between them
    path = _record(tmp_path / "r.db", durability=Durability(rows_per_commit=1_500))
    conn = sqlite3.connect(path)
    blocks = _blocks(path)
    for first, _rows in (blocks[2], blocks[len(blocks) // 2]):
        conn.execute("DELETE FROM event_blocks WHERE first_id = ?", (first,))
    conn.commit()
    coverage = block_coverage(conn)
    conn.close()
    assert coverage is not None and len(coverage.runs) == 3
    # then every row is in the frame once, as the rows give it
    assert _same(_frame(path, thin=_THIN), _frame(without_blocks(path), thin=_THIN))
