"""Keep a database and its WAL under the size cap while tracing (``--max-db``).

The oldest event rows go first (with their stack links); aggregates and
findings stay (they are small and carry the exact counts).

While tracing, space is recycled rather than returned: deleted rows leave
free pages that new rows fill, so the file stops growing at the cap and a
deletion writes only a few pages to the WAL. Returning pages to the file
system (``incremental_vacuum``) moves every live page behind the hole, and
each moved page passes through the WAL: on a small cap that alone would
carry the file past it. It runs only when the file is over the cap (an
existing recording opened with a smaller one) and at a session's end.

The WAL is bounded as well: it is checkpointed after any commit that leaves
it over a fraction of the cap (SQLite's own automatic checkpoint is off, see
``SizeCap.configure``), ``journal_size_limit`` cuts it back when it starts
over, and the cap counts it twice (until a checkpoint truncates it, its pages
are in both files). A
reader holding an old snapshot pins the WAL: it cannot be reset under the
reader, and deleting rows then would not shorten it. While that keeps the
recording at the cap, event rows are shed (counted, never stored; the
aggregates still count their events) instead of breaking the cap or making
the writer wait for the reader. Shedding starts while one more transaction
could carry the files on disk past the cap, free pages counted: they stay in
the file. How much one transaction adds to the WAL is measured, not assumed
(``SizeCap.txn_bytes``). The other writes of those seconds (per-second
aggregates, counters) are held by the writer and released a few a
transaction once the WAL can be cut.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuscope.store.blocks import trim_block_before, write_block

DEFAULT_MAX_DB = 10 << 30
# Rows are deleted down to this share of the cap, from a high-water mark above it.
HIGH_WATER = 0.8
TARGET = 0.65
# The fewest bytes of rows one deletion transaction takes out (see enforce_cap).
MIN_DELETE_CHUNK = 16 << 10
# Bytes one row costs in the time index (an 8-byte key and the row id, with
# cell and page overhead); it passes through the WAL while it is built.
INDEX_BYTES_PER_ROW = 24
# What one row puts in the WAL, and one row with its share of a column block (see SizeCap.rows_per_commit).
_TXN_BYTES_PER_ROW = 64
_TXN_BYTES_PER_BLOCK_ROW = 96
# Below this cap a recording keeps no column blocks (``gpuscope.store.blocks``).
# It then holds under about 500k rows, which explain reads as rows in a second
# or two. Blocks there would take about a quarter of the history the cap keeps,
# and the smaller transactions and extra deletions they bring cut the writer's
# rate under a 2 MiB cap from ~155k to ~95k rows a second (measured): about
# what one busy traced process makes, so the ring overflowed.
BLOCKS_MIN_CAP = 32 << 20
# Bytes before each page in the WAL (https://www.sqlite.org/fileformat2.html#walformat).
WAL_FRAME_HEADER = 24


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _frames(nbytes: int, page_size: int) -> int:
    """What ``nbytes`` of pages take in the WAL: each page behind its 24-byte frame header."""
    pages = -(-nbytes // page_size)
    return pages * (page_size + WAL_FRAME_HEADER)


def db_bytes(path: Path) -> int:
    """Return the size of a database on disk, its WAL and shared-memory files included."""
    return sum(_size(f"{path}{suffix}") for suffix in ("", "-wal", "-shm"))


def bytes_at_checkpoint(path: Path) -> int:
    """The most the file and its WAL take before the WAL is truncated (the WAL counted twice)."""
    return db_bytes(path) + _size(f"{path}-wal")


@dataclass(frozen=True, slots=True)
class Usage:
    """Space a recording takes and will take.

    ``used``: live pages plus the WAL twice and the shared memory, i.e. what
    the file grows to if nothing is deleted; ``on_disk``: the files as they
    are, the WAL twice; ``at_checkpoint``: the most the files take until the
    WAL is truncated: the file as large as the database is now (free pages
    included: they stay in the file), beside the WAL and shared memory as
    they are.
    """

    used: int
    on_disk: int
    at_checkpoint: int
    page_size: int
    live_pages: int


def usage(conn: sqlite3.Connection, path: Path) -> Usage:
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    live = pages - int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    wal, shm = _size(f"{path}-wal"), _size(f"{path}-shm")
    at_checkpoint = max(_size(str(path)), pages * page) + wal + shm
    return Usage(live * page + 2 * wal + shm, bytes_at_checkpoint(path), at_checkpoint, page, live)


def checkpoint(conn: sqlite3.Connection, *, wait: bool = False) -> bool:
    """Copy the WAL into the database and truncate it; False when a reader pins it.

    While tracing, the writer must never wait on a reader (the ring would
    fill meanwhile), so the checkpoint runs without a busy timeout unless
    ``wait`` (a session's end, where waiting costs nothing).
    """
    (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute(f"PRAGMA busy_timeout={int(timeout) if wait else 0}")
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout={int(timeout)}")
    return not busy


def _drop_orphans(conn: sqlite3.Connection) -> None:
    """Stack links older than a session's oldest remaining event, and stacks no link or row uses."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "event_stacks" not in tables:
        return
    for (sid,) in conn.execute("SELECT DISTINCT session_id FROM event_stacks").fetchall():
        # Rows are inserted in time order, so the oldest remaining row (by id,
        # no index needed) marks where the deleted history ends.
        row = conn.execute("SELECT ts_ns FROM event_log WHERE session_id = ? ORDER BY id LIMIT 1", (sid,)).fetchone()
        cutoff = row[0] if row else (1 << 63) - 1
        conn.execute("DELETE FROM event_stacks WHERE session_id = ? AND ts_ns < ?", (sid, cutoff))
        if "cpu_samples" in tables:
            # On-CPU samples of the deleted history go with it.
            conn.execute("DELETE FROM cpu_samples WHERE session_id = ? AND ts_ns < ?", (sid, cutoff))
    on_rows = {r[1] for r in conn.execute("PRAGMA table_info(event_log)")} >= {"stack_hash"}
    conn.execute(
        "DELETE FROM stacks WHERE hash NOT IN (SELECT DISTINCT stack_hash FROM event_stacks)"
        # Rows carry most calls' stacks themselves (schema 8).
        + (" AND hash NOT IN (SELECT DISTINCT stack_hash FROM event_log WHERE stack_hash != 0)" if on_rows else "")
        + (" AND hash NOT IN (SELECT DISTINCT stack_hash FROM cpu_samples)" if "cpu_samples" in tables else "")
    )


def delete_oldest(conn: sqlite3.Connection, excess_bytes: int, live: Usage) -> int:
    """Delete about ``excess_bytes`` of the oldest event rows in one transaction; return rows deleted.

    Deleting a row rewrites its page, so the transaction puts about as many
    bytes in the WAL as it deletes: callers delete in chunks, checkpointing
    between them.
    """
    rows = int(conn.execute("SELECT count(*) FROM event_log").fetchone()[0])
    if rows == 0 or excess_bytes <= 0:
        return 0
    per_row = max(live.live_pages * live.page_size / rows, 1.0)
    # At least a few pages' worth, not more: a floor of 1,000 rows was 64 KB of WAL, past a 1 MiB cap's room.
    n = min(rows, max(int(excess_bytes / per_row * 1.1), 100))
    conn.execute("BEGIN")
    (cut,) = conn.execute("SELECT id FROM event_log ORDER BY id LIMIT 1 OFFSET ?", (n - 1,)).fetchone()
    # The block cut through keeps its later rows (its trigger drops it with the first row deleted).
    kept = trim_block_before(conn, cut)
    cur = conn.execute("DELETE FROM event_log WHERE id <= ?", (cut,))
    if kept is not None:
        write_block(conn, *kept)
    _drop_orphans(conn)
    conn.execute("COMMIT")
    return int(cur.rowcount)


def give_back(conn: sqlite3.Connection) -> None:
    """Return free pages to the file system (every moved page passes through the WAL)."""
    # The pragma frees one page per step and returns no rows, so the sqlite3
    # module's execute() would stop after one page: executescript runs it to completion.
    conn.executescript("PRAGMA incremental_vacuum;")


def enforce_cap(
    conn: sqlite3.Connection,
    path: Path,
    max_bytes: int,
    *,
    room: int = 0,
    wait: bool = True,
    grew: Callable[[int | None, int], None] | None = None,
) -> int:
    """Bring a recording (plus ``room`` bytes it is about to need) under ``max_bytes``; return rows deleted.

    Runs on the writer thread, inside no transaction. Deletes nothing while a
    reader pins the WAL (after waiting for it up to the busy timeout when
    ``wait``): rows deleted then would not shorten the WAL, only lose data.
    ``grew(before, after)`` is told the WAL's size around each deletion.
    """
    if max_bytes <= 0:
        return 0
    deleted = 0
    # Each deletion's pages pass through the WAL: a chunk of 1/40 of the cap
    # keeps that inside the room the high-water mark leaves. Its WAL is about
    # twice the chunk (the rows' pages, then the stack links, samples and
    # stacks they leave behind): a floor of 64 KiB wrote 136 KB of WAL beside
    # a full 819 KB file under a 1 MiB cap, 0.9% over it with the reserve.
    chunk = max(max_bytes // 40, MIN_DELETE_CHUNK)
    for _ in range(64):
        # Under the cap there is nothing to do: no TRUNCATE checkpoint, which locks readers out while it cuts
        # the WAL (a `sqlite3` shell, with no busy timeout, failed with "database is locked" at a session's end).
        now = usage(conn, path)
        if now.used + room <= max_bytes * HIGH_WATER and now.on_disk <= max_bytes:
            break
        if not checkpoint(conn, wait=wait):
            break
        now = usage(conn, path)
        if now.used + room > max_bytes * HIGH_WATER:
            excess = now.used + room - int(max_bytes * TARGET)
            before = _size(f"{path}-wal")
            n = delete_oldest(conn, min(excess, chunk), now)
            if grew is not None:
                grew(before, _size(f"{path}-wal"))
            deleted += n
            if n:
                continue
        if now.on_disk > max_bytes:
            give_back(conn)
            continue
        break
    return deleted


def index_within_cap(conn: sqlite3.Connection, path: Path, max_bytes: int) -> int:
    """Build the deferred indexes at a session's end without the build carrying the file past the cap.

    Rows are first deleted until the index fits (its pages pass through the
    WAL, hence twice its size), then it is built and the cap enforced again.
    Returns rows deleted.
    """
    deleted = 0
    if max_bytes > 0:
        rows = int(conn.execute("SELECT count(*) FROM event_log").fetchone()[0])
        deleted += enforce_cap(conn, path, max_bytes, room=2 * INDEX_BYTES_PER_ROW * rows)
    build_indexes(conn)
    deleted += enforce_cap(conn, path, max_bytes)
    return deleted


class SizeCap:
    """Hold ``--max-db`` for the file and its WAL after every commit, not once a second.

    A second of ``--record-all`` at full speed is tens of megabytes, so the
    cap is checked after each commit (three ``stat`` calls while under the
    high-water mark) and transactions are sized so that one cannot carry the
    file past it.
    """

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.rows_deleted = 0
        self.wal_bytes = min(max_bytes // 32, 4 << 20) if max_bytes > 0 else 4 << 20
        # The recording's page size (read by configure): the WAL holds whole pages, each behind its header.
        self._page_size = 4096
        # The most one transaction was seen to add (a commit's rows, or a deletion of the oldest): rows reused
        # from scattered free pages, the freelist, the tree's inner pages. Measured at 78 kB under a 1 MiB cap
        # where 64 KiB was assumed, which carried a pinned WAL past the cap.
        self.largest_txn_bytes = 0
        # The WAL's size after the last check, from which the next commit's growth is measured.
        self._wal_after_check: int | None = None

    def configure(self, conn: sqlite3.Connection) -> None:
        """Bound the WAL: checkpoint and truncate well inside the cap.

        Checkpoints are run by ``check`` after each commit, never by SQLite
        inside COMMIT: an automatic checkpoint that fails (a full disk) makes
        COMMIT report the error although the transaction did commit, and the
        writer could no longer tell stored rows from lost ones.
        """
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(f"PRAGMA journal_size_limit={self.wal_bytes}")
        self._page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])

    @property
    def txn_bytes(self) -> int:
        """The most the next transaction may add to the WAL: the largest seen, a quarter more, or what is
        assumed before any is seen; no more than a quarter of the cap (past it, shedding would never stop)."""
        # Assumed before any is seen: its rows (1/40 of the cap, see rows_per_commit) written as whole pages,
        # with the pages of the aggregates and session rows beside them.
        assumed = _frames(max(self.max_bytes // 20, 64 << 10), self._page_size)
        seen = self.largest_txn_bytes + self.largest_txn_bytes // 4
        most = max(self.max_bytes // 4, 64 << 10)
        return min(max(assumed, seen), most)

    def _saw_growth(self, before: int | None, after: int) -> None:
        """Learn from the WAL growing from ``before`` to ``after`` bytes across one transaction.

        A WAL started over from its beginning reuses its file and grows less
        than it wrote: then nothing is learned, which is safe, since only its
        size on disk counts against the cap.
        """
        if before is not None and after > before:
            self.largest_txn_bytes = max(self.largest_txn_bytes, after - before)

    @property
    def blocks(self) -> bool:
        """Whether the writer keeps column blocks: with no cap, or one of ``BLOCKS_MIN_CAP`` or more."""
        return self.max_bytes <= 0 or self.max_bytes >= BLOCKS_MIN_CAP

    def rows_per_commit(self, default: int) -> int:
        """Rows in one transaction: its WAL frames stay under 1/40 of the cap.

        About 64 bytes a row in ``event_log``; 96 where a transaction may also
        carry the column block of as many rows (``gpuscope.store.blocks``).
        """
        if self.max_bytes <= 0:
            return default
        per_row = _TXN_BYTES_PER_BLOCK_ROW if self.blocks else _TXN_BYTES_PER_ROW
        return max(500, min(default, self.max_bytes // 40 // per_row))

    def check(self, conn: sqlite3.Connection) -> bool:
        """Checkpoint and hold the cap after a commit; return True while it can be held only by shedding rows.

        Raises sqlite3.Error from a checkpoint that fails (a full disk): the
        transaction before it is committed all the same.
        """
        wal = _size(f"{self.path}-wal")
        self._saw_growth(self._wal_after_check, wal)
        try:
            return self._hold(conn, wal)
        finally:
            self._wal_after_check = _size(f"{self.path}-wal")

    def _hold(self, conn: sqlite3.Connection, wal: int) -> bool:
        if wal > self.wal_bytes:
            # PASSIVE: a TRUNCATE checkpoint locks readers out while it cuts the
            # WAL (a `sqlite3` shell, which has no busy timeout, then fails with
            # "database is locked"). Once everything is copied back, the next
            # transaction starts the WAL over and journal_size_limit cuts it.
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        high = self.max_bytes * HIGH_WATER
        # Rows are deleted until the next transaction fits under the high-water mark too: its new pages come
        # from the free ones the deletions leave, not from growing the file (which grew to the mark plus a
        # transaction, leaving a pinned WAL too little room).
        room = self.txn_bytes
        if self.max_bytes <= 0 or bytes_at_checkpoint(self.path) + room <= high:
            return False
        self.rows_deleted += enforce_cap(conn, self.path, self.max_bytes, room=room, wait=False, grew=self._saw_growth)
        now = usage(conn, self.path)
        # Live pages alone undercount a pinned WAL's cost: the file keeps its
        # free pages, so the files on disk reach the cap before the live data
        # does (seen: a 4.4 MB file, mostly free pages, beside a 1 MB pinned
        # WAL under a 5 MiB cap). Shed while the next transaction could carry
        # the files past it, whether a reader pins the WAL now or not: one may
        # start reading as soon as the transaction commits, and the WAL is on
        # disk beside the file until the next checkpoint whatever happens.
        return now.used > high or now.at_checkpoint + self.txn_bytes > self.max_bytes


def build_indexes(conn: sqlite3.Connection) -> None:
    """Indexes deferred during tracing: built once, at the end of a session.

    Rows arrive in nearly time order, so this is a fast, mostly sequential build.
    """
    conn.execute("CREATE INDEX IF NOT EXISTS event_log_ts ON event_log(ts_ns)")


class Reserve:
    """Space set aside beside a recording, given back when the file system fills.

    When SQLite reports a full disk, the transaction at hand is rolled back,
    but closing the session row, flushing the last aggregates and writing the
    final counters still need a few pages. Deleting this file first frees
    them, so a recording stopped by a full disk is still closed and says what
    it kept. It is removed at a clean end; one left by a killed agent is
    reused by the next ``trace`` into the same file.
    """

    SIZE = 1 << 20
    MIN_SIZE = 64 << 10

    @classmethod
    def size_for(cls, max_bytes: int) -> int:
        """The reserve beside a recording capped at ``max_bytes`` (0: no cap): a sixteenth of a small cap."""
        return cls.SIZE if max_bytes <= 0 else min(cls.SIZE, max(cls.MIN_SIZE, max_bytes // 16))

    def __init__(self, db: Path, nbytes: int = SIZE) -> None:
        self.path = Path(f"{db}-reserve")
        self.nbytes = nbytes

    def create(self) -> bool:
        """Allocate the reserve (real blocks, not a sparse file); False when there is no room for it."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, self.nbytes)
            return True
        except OSError:
            self.release()
            return False
        finally:
            os.close(fd)

    def release(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass
