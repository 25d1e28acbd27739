"""Open databases: ``connect_writer`` (checks, migrates) and ``connect_reader`` (read-only, leaves no trace)."""

from __future__ import annotations

import contextlib
import enum
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from gpuscope.config import DEFAULT_DB as DEFAULT_DB  # re-exported: the default's one definition is in config
from gpuscope.config import resolve_db_path
from gpuscope.errors import DatabaseError, SchemaTooNewError
from gpuscope.platform.links import refuse_planted_side_links, resolve_refusing_planted_links
from gpuscope.store.conformance import CHANGED_REMEDY, name_problem, schema_problem, value_problem
from gpuscope.store.file_access import (
    READER_REMEDY,
    database_error,
    give_to_invoker,
    permission_denied,
    require_readable,
    require_writable,
)
from gpuscope.store.integrity import (
    READER_DAMAGE_REMEDY,
    READER_FULL_CHECK_BYTES,
    WRITER_DAMAGE_REMEDY,
    WRITER_FULL_CHECK_BYTES,
    first_problem,
)
from gpuscope.store.liveness import PROC_LOCKS, recording_holders, wal_has_frames
from gpuscope.store.migrate import migrate, schema_version
from gpuscope.store.private_snapshot import SourceChangedError, private_snapshot
from gpuscope.store.schema import SCHEMA_VERSION

_WAL_SWITCH_WAIT_S = 5.0  # as long as the busy timeout every writer sets


def default_db_path() -> Path:
    """The recording used when none is named: ``$GPUSCOPE_DB``, else the config file's ``db``, else DEFAULT_DB.

    Raises UsageError for a malformed config file (see ``gpuscope.config.resolve_db_path``).
    """
    return resolve_db_path().path


def connect_writer(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating if needed) a database for writing and bring its schema current.

    An existing file is checked first (``gpuscope.store.integrity``): a damaged
    recording is refused before anything is appended to it. A symlink another
    user planted in a shared folder, at the path, on its way or beside it as
    a ``-wal``/``-shm``/``-journal``, is refused (``gpuscope.platform.links``),
    dangling or not: writing through it would create or change its target.

    Raises DatabaseError when the path cannot be written, is not a database or
    is damaged, PlantedLinkError, SchemaTooNewError when it was written by a
    newer gpuscope.
    """
    p = Path(path).expanduser()
    real = resolve_refusing_planted_links(p)
    refuse_planted_side_links(real)
    require_writable(p)
    created = [d for d in (p, p.parent, *p.parent.parents) if not os.path.lexists(d)]
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"{p}: cannot create its folder: {exc.strerror}") from None
    real = _create_unless_present(p, real)
    try:
        conn = sqlite3.connect(file_uri(real, "rw"), uri=True, check_same_thread=False, isolation_level=None)
        try:
            _prepare_writer(conn, p)
        except BaseException:
            conn.close()
            raise
    except sqlite3.DatabaseError as exc:
        raise database_error(p, exc, DatabaseError.remedy) from None
    give_to_invoker(created)
    return conn


def _create_unless_present(p: Path, real: Path) -> Path:
    """Create the empty file SQLite would, never through a link someone made there meanwhile; return its real path.

    SQLite's own create (``mode=rwc``) follows a link at the name, dangling
    or not, and there is no way to ask it not to: the file is made here with
    O_NOFOLLOW, and SQLite opens it ``mode=rw``.
    """
    for _attempt in range(3):
        try:
            fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            if not os.path.islink(real):
                return real  # the file (or what SQLite will refuse to open)
            real = resolve_refusing_planted_links(p)  # a link made since the path was resolved: judge it too
            continue
        except OSError as exc:
            raise DatabaseError(f"{p}: cannot create: {exc.strerror}") from None
        os.close(fd)
        return real
    return real


def _prepare_writer(conn: sqlite3.Connection, p: Path) -> None:
    # One snapshot for all that is read before the first write: another writer may be creating the same file
    # meanwhile (two traces started together), and its tables seen beside a version read before they came, or its
    # pages counted while only its -wal held them, looked like another tool's file or a truncated one.
    conn.execute("BEGIN")
    try:
        existing = _check_existing(conn, p)
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # the error that matters is the one on its way out
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    if not existing:
        # Only settable before the first table (later a no-op, whoever made it): lets --max-db give pages back.
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    conn.create_function("gs_hist_merge", 2, _hist_merge, deterministic=True)
    _use_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")
    migrate(conn)


def _check_existing(conn: sqlite3.Connection, p: Path) -> bool:
    """Refuse another tool's file or a damaged one, in the caller's read transaction; whether it has pages at all."""
    if int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0:
        return False
    if schema_version(conn) == 0 and (foreign := _foreign_tables(conn)):
        raise DatabaseError(
            f"{p}: not a gpuscope database (it has other tables: {', '.join(sorted(foreign)[:5])})",
            remedy="record into a new file with --db PATH; convert an Ingero file with `gpuscope import`",
        )
    # Before the first write (journal_mode included): appending to a damaged
    # file spreads the damage, and retention and incremental vacuum move
    # pages anywhere in it. The transaction keeps the pages it counts where
    # they are (a -wal holding some is not emptied under it), so the -wal is
    # looked at, then the file's size.
    in_wal = wal_has_frames(p)
    size = p.stat().st_size
    problem = first_problem(conn, full=size <= WRITER_FULL_CHECK_BYTES, file_size=None if in_wal else size)
    if problem:
        raise DatabaseError(f"{p}: is damaged ({problem})", remedy=WRITER_DAMAGE_REMEDY)
    return True


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL, waiting (as the busy timeout would) while another writer switches the same new file.

    Two connections converting one file at once both hold a read lock and
    want the write lock: SQLite fails one at once with SQLITE_BUSY rather
    than call its busy handler (that could deadlock), so the wait is here.
    """
    deadline = time.monotonic() + _WAL_SWITCH_WAIT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY") or "locked" in str(exc)
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(0.01)  # the other's switch is one write of the header: far shorter than this


def _foreign_tables(conn: sqlite3.Connection) -> list[str]:
    return [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if r[0] != "schema_migrations" and not r[0].startswith("sqlite_")
    ]


def _hist_merge(a: bytes | None, b: bytes | None) -> bytes:
    from gpuscope.store.aggregates import decode_hist, encode_hist

    return encode_hist(decode_hist(a) + decode_hist(b))


def file_uri(path: str | os.PathLike[str], mode: str) -> str:
    """The SQLite URI of ``path`` opened with ``mode`` (``ro``, ``rw`` or ``rwc``).

    Every connection goes through here: a path is percent-quoted, so a file
    named ``a#b.db`` or ``100%.db`` is opened as itself, not as ``a`` with a
    fragment (which would also drop ``mode=ro``).
    """
    return f"file:{quote(os.fspath(path))}?mode={mode}"


class ReadMode(enum.Enum):
    """How a recording is opened for reading, so that no file beside it is created or changed."""

    CLOSED = "closed"
    """Nobody has it open and its ``-wal`` is absent or empty: ``immutable=1``, no locks, no ``-wal``/``-shm``."""
    LIVE = "live"
    """A process has it open (a trace, another reader): plain ``mode=ro`` through the ``-wal``/``-shm`` it keeps."""
    KILLED = "killed"
    """Nobody has it open but its ``-wal`` holds commits (the writer was killed): a private snapshot is read."""


def read_mode(path: str | os.PathLike[str]) -> ReadMode:
    """How ``connect_reader`` would open the recording at ``path`` right now (learnt without opening it).

    Where ``/proc/locks`` cannot be read, every recording counts as live:
    plain ``mode=ro`` is always correct, only not always traceless.
    """
    if not os.access(PROC_LOCKS, os.R_OK) or recording_holders(path):
        return ReadMode.LIVE
    if wal_has_frames(path) or _hot_journal(path):
        return ReadMode.KILLED
    return ReadMode.CLOSED


def _hot_journal(path: str | os.PathLike[str]) -> bool:
    """A rollback journal left by a killed writer of a file not in WAL mode (an Ingero file, say)."""
    try:
        return os.path.getsize(f"{os.fspath(path)}-journal") > 0
    except OSError:
        return False


def read_uri(path: str | os.PathLike[str]) -> tuple[str, ReadMode]:
    """The URI that reads the recording at ``path`` without touching its folder, and how it reads it.

    For ``ATTACH`` as much as for ``connect``. A closed recording is opened
    ``immutable=1``: SQLite then takes no lock and never looks for, creates or
    deletes a ``-wal``/``-shm``, so it reads from read-only folders and media
    and leaves nothing behind. A live one is opened plain ``mode=ro``: its
    writer keeps the ``-wal`` and ``-shm``, so nothing is created, and a
    read-only connection never checkpoints, truncates or deletes them when it
    closes; a reader who may not write the ``-shm`` (another user) reads
    through SQLite's read-only shared memory. A killed one is read from a
    private snapshot (``gpuscope.store.private_snapshot``).

    The race that remains: a writer that opens a recording *after* a reader
    chose ``immutable=1`` (a new ``gpuscope trace --db`` on the same file)
    changes pages under a reader that takes no lock; that reader may then
    miss rows or stop with "database disk image is malformed", and a rerun
    reads it as live. Likewise a writer closing between the choice and the
    open of a live reader leaves that reader to create an empty ``-wal`` and
    ``-shm``. Both windows are as short as a read; neither loses data.
    """
    p = Path(path)
    for _attempt in range(3):
        mode = read_mode(p)
        if mode is ReadMode.LIVE:
            return file_uri(p, "ro"), mode
        if mode is ReadMode.CLOSED:
            return file_uri(p, "ro") + "&immutable=1", mode
        try:
            return file_uri(private_snapshot(p), "ro") + "&immutable=1", mode
        except SourceChangedError:
            continue  # a writer opened it while it was copied: choose again
        except PermissionError as exc:
            raise permission_denied(p, Path(exc.filename or p)) from None
    # Still changing after three copies: a writer is at work, so read it as live.
    return file_uri(p, "ro"), ReadMode.LIVE


def open_read_only(path: str | os.PathLike[str]) -> tuple[sqlite3.Connection, ReadMode]:
    """A ``query_only`` connection to any SQLite file (no gpuscope checks), and how it was opened.

    Raises DatabaseError for a missing or unreadable file.
    """
    p = Path(path).expanduser()
    require_readable(p)
    uri, mode = read_uri(p)
    if mode is ReadMode.LIVE:
        for companion in (Path(f"{p}-wal"), Path(f"{p}-shm")):
            if os.path.exists(companion) and not os.access(companion, os.R_OK, effective_ids=True):
                raise permission_denied(p, companion)
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        conn.execute("PRAGMA query_only=1")
    except sqlite3.DatabaseError as exc:
        raise database_error(p, exc, READER_REMEDY) from None
    return conn, mode


def connect_reader(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open an existing gpuscope database read-only, leaving no file beside it (see ``read_uri``).

    Never migrates: reading an archive must not change it. Files of other
    formats are opened through ``gpuscope.recording.open_recording``.

    Raises DatabaseError (missing, unreadable, not gpuscope's, damaged) or
    SchemaTooNewError.
    """
    p = Path(path).expanduser()
    conn, mode = open_read_only(p)
    try:
        verify_reader(conn, p, mode)
    except BaseException:
        conn.close()
        raise
    return conn


def verify_reader(conn: sqlite3.Connection, path: Path, mode: ReadMode) -> None:
    """Refuse what ``open_read_only`` opened unless it is a sound gpuscope database of a schema this one reads.

    A closed file (or the snapshot of a killed one) up to
    ``READER_FULL_CHECK_BYTES`` gets a full ``quick_check``; a larger or live
    one the bounded check (numbers in ``gpuscope.store.integrity``). Then a
    schema or values changed after gpuscope wrote them are refused
    (``gpuscope.store.conformance``; every event's values only with the full check).
    """
    header = _check_header(conn, path)
    if header is not None:
        _check_pages(conn, path, mode, header)


class PendingCheck:
    """The page and value check of a closed recording, on a connection of its own while the caller reads.

    ``result()`` waits for it and raises its DatabaseError; ``join()`` only waits.
    """

    def __init__(self, path: Path | None = None, header: _Header | None = None) -> None:
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if path is not None and header is not None:
            self._thread = threading.Thread(target=self._run, args=(path, header), name="gpuscope-check", daemon=True)
            self._thread.start()

    def _run(self, path: Path, header: _Header) -> None:
        try:
            other, _ = open_read_only(path)
            try:
                _check_pages(other, path, ReadMode.CLOSED, header)
            finally:
                other.close()
        except BaseException as exc:  # handed to result()
            self._error = exc

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self) -> None:
        self.join()
        if self._error is not None:
            raise self._error


def verify_reader_meanwhile(conn: sqlite3.Connection, path: Path, mode: ReadMode) -> PendingCheck:
    """``verify_reader``, with the page and value check of a closed file left running beside the caller's reads.

    That check reads every page of a file under ``READER_FULL_CHECK_BYTES``
    (0.6 s for a 60 MB one here) in SQLite, without the GIL: the caller's own
    reading goes on meanwhile, and must call ``result()`` before trusting what
    it read. Live and killed recordings are checked at once, as by ``verify_reader``.
    """
    header = _check_header(conn, path)
    if header is None:
        return PendingCheck()
    if mode is not ReadMode.CLOSED:
        _check_pages(conn, path, mode, header)
        return PendingCheck()
    return PendingCheck(path, header)


@dataclass(frozen=True, slots=True)
class _Header:
    """What the quick part of the check read, for the rest: the schema version and the file's signature."""

    version: int
    signature: tuple[object, ...] | None


def _check_header(conn: sqlite3.Connection, path: Path) -> _Header | None:
    """The quick part of ``verify_reader``: a gpuscope schema this one reads. None when the rest need not run."""
    try:
        version = schema_version(conn)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}
    except sqlite3.DatabaseError as exc:
        raise database_error(path, exc, READER_REMEDY) from None
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(f"{path}: schema version {version} is newer than this gpuscope ({SCHEMA_VERSION})")
    if "event_log" not in tables:
        raise DatabaseError(
            f"{path}: not a gpuscope database (no event_log table)",
            remedy="pass a database written by `gpuscope trace`",
        )
    if version == 0:
        # gpuscope's tables without a version: nothing says which schema they follow, so nothing can check them.
        raise DatabaseError(
            f"{path}: not a gpuscope recording, or one whose version was reset "
            "(user_version 0 with an event_log table)",
            remedy="pass a database written by `gpuscope trace`, as it wrote it",
        )
    signature = file_signature(database_path(conn))
    if signature is not None and signature in _VERIFIED:
        return None  # these very bytes passed the check in this process (a server opens its recording per request)
    return _Header(version, signature)


def _check_pages(conn: sqlite3.Connection, path: Path, mode: ReadMode, header: _Header) -> None:
    """The pages, then the schema and values, of a recording whose header passed; remembered when sound."""
    version, signature = header.version, header.signature
    if mode is ReadMode.LIVE:
        full = False
        problem = first_problem(conn, full=False)
    else:
        size = os.stat(database_path(conn)).st_size
        full = size <= READER_FULL_CHECK_BYTES
        problem = first_problem(conn, full=full, file_size=size)
    if problem:
        raise DatabaseError(f"{path}: is damaged ({problem})", remedy=READER_DAMAGE_REMEDY)
    # Damage met only here (past a bounded check) reaches the command line as SQLite's own "malformed" error.
    if version >= 1 and (
        changed := schema_problem(conn, version) or value_problem(conn, scan=full) or name_problem(conn)
    ):
        raise DatabaseError(f"{path}: is not as gpuscope wrote it ({changed})", remedy=CHANGED_REMEDY)
    if signature is not None:
        with _VERIFIED_LOCK:
            if len(_VERIFIED) >= 64:
                _VERIFIED.clear()
            _VERIFIED.add(signature)


# Files that passed verify_reader in this process, by path, size and modification time of the file and its
# WAL: any write changes one of them, and the check runs again.
_VERIFIED: set[tuple[object, ...]] = set()
_VERIFIED_LOCK = threading.Lock()


def file_signature(path: str | os.PathLike[str]) -> tuple[object, ...] | None:
    """What changes when a recording's bytes do: its identity, size and time, and its WAL's (an empty WAL counts as
    none: the first reader creates one without changing any data). None when the file cannot be stat'ed."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError:
        return None
    try:
        wal = os.stat(path + "-wal")
        wal_sig: tuple[int, int] = (wal.st_size, wal.st_mtime_ns) if wal.st_size else (0, 0)
    except OSError:
        wal_sig = (0, 0)
    return (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns, *wal_sig)


def database_path(conn: sqlite3.Connection) -> str:
    """Return the file behind the ``main`` schema of ``conn`` (for a converted recording, the converted file)."""
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


def connect_probe(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open any SQLite file read-only to look at its schema (no gpuscope checks), as readers open one."""
    return open_read_only(path)[0]


def table_names(conn: sqlite3.Connection) -> set[str]:
    """The tables (not views) of a database."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def column_names(conn: sqlite3.Connection, table: str) -> set[str]:
    """The columns of a table (none for a table that does not exist)."""
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
