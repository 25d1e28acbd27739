"""Whether this user may read or write a recording's path, and the one-line errors that say why not.

Checked with ``stat`` and ``access`` before SQLite opens anything, so the
message names the file, folder or ``-wal`` at fault; SQLite's own failures
are worded here too (``database_error``). Under sudo, what a writer created
is handed to the invoking user (``give_to_invoker``).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from gpuscope.config import invoking_user
from gpuscope.errors import DatabaseError
from gpuscope.store.integrity import READER_DAMAGE_REMEDY, is_damage

READER_REMEDY = "check the file is a gpuscope database"
_PERMISSION_REMEDY = "ask the file's owner for access (or run as that user), or pass another path with --db PATH"


def database_error(p: Path, exc: sqlite3.DatabaseError, remedy: str) -> DatabaseError:
    """The one-line error for an SQLite failure on ``p``."""
    msg = str(exc)
    if is_damage(exc) and "not a database" not in msg:
        return DatabaseError(f"{p}: is damaged ({msg})", remedy=READER_DAMAGE_REMEDY)
    if is_damage(exc):
        return DatabaseError(f"{p}: not a valid SQLite database ({msg})", remedy=remedy)
    if "readonly" in msg:
        return DatabaseError(f"{p}: permission denied ({msg})", remedy=_PERMISSION_REMEDY)
    return DatabaseError(f"{p}: {msg}", remedy=remedy)


def permission_denied(p: Path, what: Path, *, writing: bool = False) -> DatabaseError:
    """``p``: permission denied, naming ``what`` when it is not ``p`` itself (its folder, its ``-wal``)."""
    if what == p:
        where = ""
    elif os.path.isdir(what):
        where = f" (folder {what})"
    else:
        where = f" ({what.name})"
    if writing and _read_only_file_system(what):
        where += " on a read-only file system"
    return DatabaseError(f"{p}: permission denied{where}", remedy=_PERMISSION_REMEDY)


def _read_only_file_system(path: Path) -> bool:
    for candidate in (path, *path.parents):
        try:
            return bool(os.statvfs(candidate).f_flag & os.ST_RDONLY)
        except OSError:
            continue
    return False


def require_readable(p: Path) -> None:
    """Refuse a missing or unreadable file with a clear line (stat and access only: nothing is opened)."""
    try:
        st = os.stat(p)
    except PermissionError:
        raise permission_denied(p, p.parent) from None
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise DatabaseError(f"{p}: no such database", remedy="record one with `gpuscope trace`, or pass --db PATH")
    if not os.access(p, os.R_OK, effective_ids=True):
        raise permission_denied(p, p)


def require_writable(p: Path) -> None:
    """Refuse a path this user may not write, or whose folder cannot take the ``-wal`` and ``-shm``."""
    try:
        exists = stat.S_ISREG(os.stat(p).st_mode)
    except PermissionError:
        raise permission_denied(p, p.parent, writing=True) from None
    except OSError:
        exists = False
    if exists and not os.access(p, os.W_OK, effective_ids=True):
        raise permission_denied(p, p, writing=True)
    folder = next((d for d in p.parents if os.path.exists(d)), None)
    # SQLite creates NAME-wal and NAME-shm beside the file: the folder must be writable too.
    if folder is not None and not os.access(folder, os.W_OK | os.X_OK, effective_ids=True):
        raise DatabaseError(
            f"{p}: permission denied (folder {folder}: a recording needs its -wal and -shm beside it)"
            + (" on a read-only file system" if _read_only_file_system(folder) else ""),
            remedy="record into a folder you may write with --db PATH",
        )


def give_to_invoker(created: list[Path]) -> None:
    """Under sudo, hand what this run created in the invoking user's folders to that user.

    ``sudo gpuscope trace`` then ``gpuscope explain`` as oneself must work:
    the new recording (and the folders made for it) belong to whoever owns
    the folder they were made in, when that is the user who ran sudo. SQLite
    itself gives its -wal and -shm files the owner of the database file.
    Existing files keep their owner; other users' folders are left alone.
    """
    invoker = invoking_user()
    if invoker is None or not created:
        return
    try:
        if os.stat(created[-1].parent).st_uid != invoker.uid:
            return
        for path in reversed(created):
            os.chown(path, invoker.uid, invoker.gid, follow_symlinks=False)
        for suffix in ("-wal", "-shm"):
            side = created[0].with_name(created[0].name + suffix)
            if side.exists() and side.stat().st_uid == 0:
                os.chown(side, invoker.uid, invoker.gid, follow_symlinks=False)
    except OSError:
        pass  # e.g. a file system without owners: the recording is still root's and readable
