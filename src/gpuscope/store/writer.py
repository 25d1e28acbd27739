"""The single writer: a thread that turns decoded event batches into rows (``gpuscope.store.events_write``).

Batches come in through a queue bounded in time (rows at the writer's
measured pace). When SQLite cannot keep up, ``put`` blocks, the collector
stops draining, the BPF ring fills and the kernel side counts every record
it cannot reserve: an event is either stored or counted as dropped, never
lost in between. Transactions commit at least every 200 ms (``Durability``),
so a killed agent loses only its last fraction of a second.

Everything else a recording writes (the session row, processes, cgroups,
stacks, aggregates) goes through the same queue as a named store function,
``writer.write(insert_cgroup, cgroup, seen_ns)``, in order with the events:
callers hand over data, the SQL stays in ``gpuscope.store``.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Concatenate, ParamSpec

import numpy as np

from gpuscope.store.blocks import BLOCK_MAX_AGE_S, BLOCK_ROWS, last_row_id, write_block
from gpuscope.store.commit_policy import NOW, Durability, NowMark, ReadMark, is_disk_full
from gpuscope.store.events_write import BLOCK_INDEX, EventRows, PendingBlock

__all__ = ["NOW", "Durability", "EventWriter", "ReadMark", "events_end_ns", "is_disk_full"]

P = ParamSpec("P")

# Named writes held while shedding that one transaction releases: each touches a page or a few (aggregates,
# counters, samples), so a handful fits beside what SizeCap allows one transaction.
HELD_WRITES_PER_COMMIT = 4


def events_end_ns(conn: sqlite3.Connection) -> int:
    """Return when the last stored event ends (0 when there are none), so new events can start after it."""
    (end,) = conn.execute("SELECT max(ts_ns + duration_ns) FROM event_log").fetchone()
    return int(end or 0)


@dataclass(frozen=True, slots=True)
class _Write:
    """A named write queued for the writer thread: ``fn(conn, *args, **kwargs)`` inside its transaction."""

    fn: Callable[..., object]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Maintenance:
    """A function queued for the writer thread to run between transactions."""

    fn: Callable[..., object]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Batch:
    """Events and how far the reading was complete when they were read.

    A batch split into parts carries its mark on its last part only (None on
    the others): a commit may say the recording is complete up to it only
    once every part is in.
    """

    events: np.ndarray
    mark: ReadMark | None
    # Each event's stack hash (0: none), stored on its row (event_log.stack_hash).
    stack_hashes: np.ndarray | None = None


_Item = _Batch | _Write | _Maintenance


class EventWriter:
    """Own one writer connection on a background thread.

    When SQLite fails (a full disk, an I/O error), the writer rolls back the
    transaction at hand and degrades instead of dying: ``failure`` says why,
    event batches are counted in ``rows_lost`` and discarded, and named writes
    still run one by one (each its own transaction, errors ignored), so the
    caller can still close the session row and say what was kept.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        session_id: int,
        *,
        max_pending: int = 64,
        durability: Durability | None = None,
        on_commit: Callable[[sqlite3.Connection, ReadMark], None] | None = None,
        after_commit: Callable[[sqlite3.Connection], None] | None = None,
        on_failure: Callable[[], None] | None = None,
        blocks: bool = True,
    ) -> None:
        """``on_commit(conn, mark)`` runs inside each transaction just before it commits (see ``_mark``);
        ``after_commit(conn)`` runs after each commit (size caps);
        ``on_failure()`` runs once when SQLite fails, before the queued writes that follow (it frees reserved space);
        ``blocks``: also write the rows' column blocks (``gpuscope.store.blocks``; ``SizeCap.blocks`` decides).
        """
        self._conn = conn
        self._blocks = blocks
        self._rows = EventRows(conn, session_id)
        self._session_id = session_id
        self._durability = durability or Durability()
        self._on_commit = on_commit
        self._after_commit = after_commit
        self._on_failure = on_failure
        self._queue: queue.Queue[_Item | None] = queue.Queue(max_pending)
        self.rows_written = 0
        self._lost_here = 0  # counted on the writer thread
        self._refused = 0  # counted by the producer after a failure
        self._txn_rows = 0
        self.shed = False
        self.rows_shed = 0
        self.failure: str | None = None
        self.error: BaseException | None = None
        self._pending_rows = 0
        self._room = threading.Condition()
        # Rows per second of insert time (an average that follows the load), for the queue bound.
        self._rate = 200_000.0
        self._block = PendingBlock()
        # Named writes held while shedding (see _loop).
        self._deferred: list[_Write] = []
        # The newest mark stored, and the rows stored since (see ReadMark.events_seen).
        self._last_mark: ReadMark | None = None
        self._rows_after_mark = 0
        self._thread = threading.Thread(target=self._run, name="gpuscope-writer", daemon=True)
        self._thread.start()

    # -- producer side -------------------------------------------------------

    def put(
        self, events: np.ndarray, stack_hashes: np.ndarray | None = None, mark: ReadMark | NowMark | None = NOW
    ) -> None:
        """Queue a batch, and each event's stack hash (0: none); blocks while the writer is behind (backpressure).

        ``mark``: how far the reading is complete once this batch is stored (``NOW``: up to this moment; None:
        the batch says nothing of it, e.g. events made from counters). After a failure (see ``failure``) the
        batch is counted as lost instead.
        """
        if not len(events):
            return
        if self.failure is not None:
            self._refused += len(events)
            return
        if isinstance(mark, NowMark):
            mark = ReadMark(time.time_ns(), time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        # Split: transactions are bounded in rows and time, and the queue in
        # time; one batch from the ring may hold more than any of these.
        limit = self._pending_limit()
        step = min(self._durability.rows_per_commit, max(limit // 4, 1024))
        for lo in range(0, len(events), step):
            part = events[lo : lo + step]
            last = lo + step >= len(events)
            with self._room:
                # Bounded in time at the writer's pace: what waits here is what a SIGKILL loses.
                limit = self._pending_limit()
                while self._pending_rows > 0 and self._pending_rows + len(part) > limit:
                    if not self._room.wait(timeout=1.0) and not self._thread.is_alive():
                        break
                self._pending_rows += len(part)
            hashes = None if stack_hashes is None else stack_hashes[lo : lo + step]
            self._queue.put(_Batch(part, mark if last else None, hashes))

    def write(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """Run the named store write ``fn(conn, *args, **kwargs)`` on the writer thread, in order with events.

        It runs inside the writer's current transaction, so it must not commit.
        Blocks while the writer is behind, like ``put``.
        """
        self._queue.put(_Write(fn, args, kwargs))

    def call_fn(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """Run ``fn(conn, *args, **kwargs)`` on the writer thread, outside any transaction, in order."""
        self._queue.put(_Maintenance(fn, args, kwargs))

    def _pending_limit(self) -> int:
        d = self._durability
        return int(min(max(self._rate * d.pending_s, d.min_pending_rows), d.max_pending_rows))

    @property
    def bulk_rows(self) -> bool:
        """Whether rows go in as one blob a statement (``gs_int64_rows`` loaded), not as values bound from Python."""
        return self._rows.bulk_rows

    @property
    def rows_lost(self) -> int:
        """Events handed to the writer that will never be stored (rolled back or refused after a failure)."""
        return self._lost_here + self._refused

    def pending(self) -> int:
        """Return how many items wait in the queue (a gauge of how far behind the writer is)."""
        return self._queue.qsize()

    def close(self) -> None:
        """Flush everything queued, then stop the thread.

        A full disk is a state (``failure``), not an error: the caller reports it.
        Any other failure is re-raised here, after the queued named writes ran.
        """
        self._queue.put(None)
        self._thread.join()
        if self.error is not None and self.failure != "disk full":
            raise self.error

    # -- writer thread -------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self.error = exc
            self._block = PendingBlock()  # it may hold rows rolled back: those rows are read as rows
            # The rows of the transaction at hand are rolled back: lost, not written.
            self.rows_written -= self._txn_rows
            self._lost_here += self._txn_rows
            self._txn_rows = 0
            self.failure = "disk full" if is_disk_full(exc) else f"error: {exc}"
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if self._on_failure is not None:
                self._on_failure()
            self._degraded()

    def _loop(self) -> None:
        conn, limits = self._conn, self._durability
        carried: _Item | None = None  # a batch that would have carried the last transaction past its rows
        while True:
            item, carried = (carried, None) if carried is not None else (self._queue.get(), None)
            if item is None:
                if self._block.rows or self._deferred:
                    # The end: what was held while the WAL was pinned is written now, whatever the cap says.
                    conn.execute("BEGIN")
                    self._run_deferred()
                    if self._block.rows:
                        self._flush_block()
                    conn.execute("COMMIT")
                return
            if self._deferred and not self.shed:
                # The WAL can be cut again: what was held while it could not goes first, a few writes a
                # transaction, the cap checked after each. (``shed`` changes only after a commit, on this
                # thread.) Released all at once after a long pinned stretch, they made one commit of 31 pages,
                # past the most SizeCap allows one transaction.
                conn.execute("BEGIN")
                self._run_deferred(HELD_WRITES_PER_COMMIT)
                self._commit(self._mark(None, True))
                carried = item
                continue
            conn.execute("BEGIN")
            began = time.monotonic()
            rows = 0
            newest: _Batch | None = None
            wrote = False
            # Coalesce what is queued into one transaction, bounded in time and
            # rows: an endless stream must still commit (a SIGKILL loses only
            # what is not), and one transaction must fit a small --max-db.
            while True:
                if isinstance(item, _Write) and self.shed:
                    # A reader pins the WAL and the cap is near: every page written now stays in the WAL
                    # (aggregates, counters, marks grew a pinned WAL past a 1 MiB cap). Held, in order, until
                    # the WAL can be cut again.
                    self._deferred.append(item)
                elif isinstance(item, _Write):
                    item.fn(conn, *item.args, **item.kwargs)
                    wrote = True
                elif isinstance(item, _Maintenance):
                    # Maintenance (retention, checkpoints) runs between transactions,
                    # after every row is in a block (retention trims blocks, not pending rows).
                    wrote = self._run_deferred() or wrote
                    self._commit(self._mark(newest, wrote), flush=True)
                    item.fn(conn, *item.args, **item.kwargs)
                    conn.execute("BEGIN")
                    began, rows, newest, wrote = time.monotonic(), 0, None, False
                else:
                    taken = self._take(item)
                    rows += taken
                    wrote = wrote or taken > 0
                    if item.mark is not None:
                        newest = item
                        self._last_mark = item.mark
                        self._rows_after_mark = 0
                    else:
                        # Parts of a split batch, events made from counters: stored after the mark, counted in
                        # the events read before the next one.
                        self._rows_after_mark += taken
                if rows >= limits.rows_per_commit or time.monotonic() - began >= limits.commit_every_s:
                    break
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    wrote = self._run_deferred() or wrote
                    self._commit(self._mark(newest, wrote), flush=True)
                    return
                if isinstance(nxt, _Batch) and not self.shed and rows + len(nxt.events) > limits.rows_per_commit:
                    # Whole batches only up to the bound: taking one more made transactions of up to twice
                    # the rows the size cap sized them for.
                    carried = nxt
                    break
                item = nxt
            self._commit(self._mark(newest, wrote))

    def _run_deferred(self, most: int | None = None) -> bool:
        """Run the named writes held while shedding, the first ``most`` of them (None: all), in the transaction
        at hand; whether there were any."""
        if not self._deferred:
            return False
        cut = len(self._deferred) if most is None else most
        held, self._deferred = self._deferred[:cut], self._deferred[cut:]
        for item in held:
            item.fn(self._conn, *item.args, **item.kwargs)
        return True

    def _mark(self, newest: _Batch | None, wrote: bool) -> ReadMark | None:
        """What a commit marks: the newest marked batch's mark, with the events read counting the rows stored
        after it (parts of a split batch, a transaction of them alone included); none for a transaction of
        shed rows only, or before any mark.

        While a reader pins the WAL, every page written stays in it: marking
        progress on each commit of shed rows would grow it by a page a commit.
        """
        if self.shed and not wrote:
            return None
        mark = newest.mark if newest is not None else (self._last_mark if self._rows_after_mark else None)
        if mark is not None and mark.events_seen is not None and self._rows_after_mark:
            mark = replace(mark, events_seen=mark.events_seen + self._rows_after_mark)
        return mark

    def _dequeued(self, batch: _Batch) -> None:
        """A batch left the queue: make room for the producer waiting in ``put``."""
        with self._room:
            self._pending_rows -= len(batch.events)
            self._room.notify_all()

    def _take(self, batch: _Batch) -> int:
        self._dequeued(batch)
        if self.shed:
            self.rows_shed += len(batch.events)
            return 0
        began = time.perf_counter()
        self._insert(batch.events, batch.stack_hashes)
        spent = time.perf_counter() - began
        if spent > 0 and len(batch.events) >= 256:
            self._rate = 0.8 * self._rate + 0.2 * (len(batch.events) / spent)
        return len(batch.events)

    def _commit(self, mark: ReadMark | None, *, flush: bool = False) -> None:
        if self._block.rows and (flush or time.monotonic() - self._block.since >= BLOCK_MAX_AGE_S):
            self._flush_block()
        if mark is not None and self._on_commit is not None:
            self._on_commit(self._conn, mark)
        self._conn.execute("COMMIT")
        self._txn_rows = 0
        if self._after_commit is not None:
            self._after_commit(self._conn)

    def _degraded(self) -> None:
        """After a failure: count batches as lost, run named writes one by one, until closed."""
        # The named writes held while shedding come first, as they would have.
        held: list[_Item | None] = list(self._deferred)
        self._deferred = []
        while True:
            item = held.pop(0) if held else self._queue.get()
            if item is None:
                return
            if isinstance(item, _Batch):
                self._dequeued(item)
                self._lost_here += len(item.events)
                continue
            try:
                if isinstance(item, _Write):
                    self._conn.execute("BEGIN")
                    item.fn(self._conn, *item.args, **item.kwargs)
                    self._conn.execute("COMMIT")
                else:
                    item.fn(self._conn, *item.args, **item.kwargs)
            except sqlite3.Error:
                try:
                    self._conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass

    def _insert(self, ev: np.ndarray, stack_hashes: np.ndarray | None) -> None:
        n = len(ev)
        cols = self._rows.insert(ev, stack_hashes)
        self.rows_written += n
        self._txn_rows += n
        if not self._blocks:
            return
        first = last_row_id(self._conn) - n + 1
        if self._block.rows and first != self._block.next_id:
            self._flush_block()  # ids not contiguous with the pending ones (rows inserted by other means)
        self._block.add(first, cols[:, BLOCK_INDEX])
        # No bigger than a transaction's rows: under a small --max-db a block must fit its WAL budget too.
        if self._block.rows >= min(BLOCK_ROWS, self._durability.rows_per_commit):
            self._flush_block()

    def _flush_block(self) -> None:
        """Write the pending rows' column block, in the transaction at hand."""
        first, columns = self._block.take()
        write_block(self._conn, self._session_id, first, columns)
