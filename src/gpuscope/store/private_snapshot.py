"""Private snapshots of recordings whose writer was killed, and the per-user cache that holds them.

A writer killed before it closed leaves committed transactions in the
``-wal`` beside the recording. SQLite can only read them through the
``-shm`` index, which a reader would have to create (or rebuild) beside the
recording: the very thing readers must never do. Instead the database and
its ``-wal`` are copied into a per-user cache, the copy is checkpointed into
one self-contained file, and that file is read. The recording and its folder
are left exactly as they were, so the killed session can still be salvaged or
appended to by its owner.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from gpuscope.errors import DatabaseError
from gpuscope.store.integrity import READER_DAMAGE_REMEDY

UNUSED_AFTER_S = 7 * 24 * 3600
UNFINISHED_AFTER_S = 3600  # no copy takes an hour: its reader is dead


class SourceChangedError(Exception):
    """The recording changed while it was being copied (a writer opened it): the copy cannot be trusted."""


def user_cache_dir(name: str, *, remedy: str) -> Path:
    """A private folder ``$XDG_CACHE_HOME/gpuscope/<name>`` (default ``~/.cache``), created if needed.

    Falls back to a per-user folder under the temporary directory when the
    cache cannot be created (a read-only or foreign home), so reading never
    needs a writable home. Raises DatabaseError with ``remedy`` when neither
    can be used.
    """
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for candidate in (base / "gpuscope" / name, Path(tempfile.gettempdir()) / f"gpuscope-{os.getuid()}-{name}"):
        try:
            candidate.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        # A folder of another user's at the fallback name must not receive our copies.
        if candidate.stat().st_uid == os.getuid() and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    raise DatabaseError(f"{base / 'gpuscope' / name}: cannot create the cache folder", remedy=remedy)


_SNAPSHOT_REMEDY = (
    "set XDG_CACHE_HOME to a folder with room for a copy of the recording, "
    "or let its owner run `gpuscope trace --db FILE` once more to close it"
)


def snapshot_dir() -> Path:
    """Where private snapshots of killed recordings are kept: ``$XDG_CACHE_HOME/gpuscope/snapshots``."""
    return user_cache_dir("snapshots", remedy=_SNAPSHOT_REMEDY)


def private_snapshot(path: Path) -> Path:
    """A self-contained copy of the recording at ``path`` with every transaction committed to its ``-wal``.

    (For a file in rollback-journal mode, the copy is what SQLite reads once
    it has rolled back the ``-journal`` a killed writer left.)

    The copy is keyed by device, inode, size and modification time of the
    database and of its ``-wal`` (or ``-journal``), so it is made once per state of the
    recording; older copies of the same recording are removed. Only call this
    when no process has the recording open (``gpuscope.store.liveness``): the
    files are read with ordinary opens, which in a process holding the
    recording through SQLite would drop its locks.

    Raises SourceChangedError when the files changed while being copied,
    PermissionError when they may not be read, and DatabaseError when the
    cache cannot hold the copy.
    """
    suffix = "-wal" if os.path.exists(f"{path}-wal") else "-journal"
    wal = Path(f"{path}{suffix}")
    before = _identity(path, wal)
    stem = f"{path.name}-{before[0]:x}-{before[1]}"
    key = hashlib.sha256(repr(before).encode()).hexdigest()[:16]
    cache = snapshot_dir()
    out = cache / f"{stem}-{key}.db"
    if out.is_file():
        os.utime(out)  # its modification time is its last use: see _remove_unused
        return out
    need = before[2] + 2 * before[5]  # the copy of both, and the pages the checkpoint moves into the file
    if shutil.disk_usage(cache).free < need:
        raise DatabaseError(
            f"{path}: its writer was killed and reading it needs a private copy of {need >> 20} MiB, "
            f"more than {cache} has free",
            remedy=_SNAPSHOT_REMEDY,
        )
    _remove_unused(cache)
    work = Path(tempfile.mkdtemp(prefix=".making-", dir=cache))
    try:
        copy = work / "snapshot.db"
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, f"{copy}{suffix}")
        except PermissionError:
            raise  # the caller names it: permission denied on the recording or its -wal
        except OSError as exc:
            raise DatabaseError(
                f"{path}: cannot copy it into {cache}: {exc.strerror}", remedy=_SNAPSHOT_REMEDY
            ) from None
        if _identity(path, wal) != before:
            raise SourceChangedError(str(path))
        _checkpoint(copy, shown=path)
        os.replace(copy, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for old in cache.glob(f"{_glob_escape(stem)}-*.db"):
        if old != out:
            old.unlink(missing_ok=True)
    return out


def _identity(path: Path, wal: Path) -> tuple[int, ...]:
    try:
        a, b = os.stat(path), os.stat(wal)
    except FileNotFoundError:
        raise SourceChangedError(str(path)) from None  # a writer opened and closed it: its -wal is gone
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns, b.st_ino, b.st_size, b.st_mtime_ns)


def _checkpoint(copy: Path, *, shown: Path) -> None:
    """Fold the copied ``-wal`` into the copy (or roll back its ``-journal``) and leave it one file.

    SQLite replays only the frames of committed transactions whose checksums
    hold, so a ``-wal`` torn by the kill yields exactly what was committed.
    """
    conn = sqlite3.connect(f"file:{quote(os.fspath(copy))}?mode=rw", uri=True, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.execute("PRAGMA journal_mode=DELETE").fetchall()
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(
            f"{shown}: its writer was killed and what it committed cannot be read ({exc})",
            remedy=READER_DAMAGE_REMEDY,
        ) from None
    finally:
        conn.close()


def _remove_unused(cache: Path) -> None:
    """Remove snapshots unused for a week (their recording may be long gone) and half-made copies of dead readers."""
    now = time.time()
    for entry in cache.iterdir():
        try:
            age = now - entry.stat().st_mtime
        except OSError:
            continue
        if entry.name.startswith(".making-") and age > UNFINISHED_AFTER_S:
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.suffix == ".db" and age > UNUSED_AFTER_S:
            entry.unlink(missing_ok=True)


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)
