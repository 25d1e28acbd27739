"""Output files that are whole or absent: written beside their destination, renamed into place at the end.

Commands that write a file (``import``, ``merge``, ``export``) share two
rules. An output is never one of the command's inputs, under any name: the
same path, a relative path, a symlink, a hard link, or an input's SQLite side
file (``-wal``, ``-shm``, ``-journal``: replacing a live recording's ``-wal``
loses its committed rows, truncating its ``-shm`` crashes its writer). And a
failure half-way (an error, a full disk, Ctrl-C) leaves no partial output,
while an existing file at the destination keeps its old content until the
new one is complete and on disk.

Files are compared by identity (``st_dev``, ``st_ino``) through ``os.stat``,
never by opening them: closing any descriptor of a database drops every
POSIX lock this process holds on it through SQLite.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import sqlite3
import stat
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

from gpuscope.errors import GpuscopeError, UsageError
from gpuscope.platform.links import resolve_refusing_planted_links

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
# SQLite's (extended) result codes for a write the disk refused: full, past RLIMIT_FSIZE, failed.
_SQLITE_WRITE_FAILURES = frozenset(
    {"SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_DIR_FSYNC", "SQLITE_IOERR_TRUNCATE"}
)

StrPath = str | os.PathLike[str]


class SameFileError(UsageError):
    remedy = "write to a new file: -o OTHER"


class OutputBusyError(UsageError):
    remedy = "write to a new file: -o OTHER, or stop the process that has it open first"


class OutputError(GpuscopeError):
    remedy = "check the output's folder exists, is writable and has free space, or write elsewhere with -o"


def refuse_same_file(output: StrPath, inputs: Iterable[StrPath]) -> None:
    """Raise SameFileError when ``output`` names one of ``inputs`` or one of their SQLite side files.

    Names are compared by what they point at, not as strings: a relative
    path, a symlink or a hard link to an input is that input. Nothing is
    opened; an output that does not exist yet is compared by resolved path.
    """
    out = Path(output).expanduser()
    for given in inputs:
        source = Path(given).expanduser()
        if _same_file(out, source):
            raise SameFileError(f"{output}: the output is also an input ({given})")
        for side in SQLITE_SIDE_FILES:
            if _same_file(out, Path(f"{source}{side}")):
                raise SameFileError(f"{output}: the output is also an input (the {side} side file of {given})")


def database_write_failure(exc: sqlite3.Error, output: StrPath) -> OutputError | None:
    """An OutputError naming ``output`` when ``exc`` is SQLite failing to write (a full disk), else None.

    SQLite reports such a failure as "disk I/O error" or "database or disk is
    full", without a path: this says which file and what to do about it.
    """
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+; older ones have only the message
    if name in _SQLITE_WRITE_FAILURES or "disk is full" in str(exc):
        return OutputError(f"{output}: cannot write: {exc}")
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): the same name is still the same file
        return os.path.realpath(a) == os.path.realpath(b)


@contextlib.contextmanager
def atomic_output(
    dest: StrPath,
    *,
    special_in_place: bool = False,
    holders: Callable[[Path], Collection[int]] | None = None,
) -> Iterator[Path]:
    """Yield a temporary path beside ``dest`` that becomes ``dest`` when the block succeeds.

    The temporary file is created (empty, hidden, ``.NAME.PID.*.tmp``, see
    ``_temporary_beside``) in the destination's own folder, so the final
    rename is atomic. On success it is flushed to disk (fsync), given the
    mode of the file it replaces (or that of a new file), and renamed over
    ``dest``; the folder is synced so the rename survives a crash too. On
    any failure, KeyboardInterrupt included, the temporary file and SQLite
    side files beside it are removed and ``dest`` is left as it was.

    A symlink at ``dest`` (or in its folders) is followed: its target is
    replaced and the link kept; but not one that another user planted in a
    shared folder (``gpuscope.platform.links``). A destination that exists
    but is not a regular file (a FIFO, a terminal, ``/dev/null``) is yielded
    itself to be written in place when ``special_in_place``, and refused
    otherwise.

    ``holders`` makes the destination a database: it returns the pids that
    have a file open (``gpuscope.store.liveness.recording_holders``). A
    destination someone has open is refused, and the old file's ``-wal``,
    ``-shm`` and ``-journal`` are removed before the rename, since SQLite
    would otherwise replay them onto the new file and corrupt it.

    Raises OutputBusyError and UsageError (a folder or special file given as
    output), PlantedLinkError, OutputError (the temporary file cannot be
    made, synced or renamed), or whatever the block raised.
    """
    target = resolve_refusing_planted_links(dest)
    old = _stat(target)
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise UsageError(f"{dest}: is a folder", remedy=f"name a file in it: -o {dest}/NAME")
    if old is not None and not stat.S_ISREG(old.st_mode):
        if special_in_place:
            yield target
            return
        raise UsageError(f"{dest}: not a regular file", remedy="write to a file: -o OUT.db")
    if holders is not None:
        busy = sorted(holders(target))
        if busy:
            pids = ", ".join(f"pid {p}" for p in busy)
            raise OutputBusyError(f"{dest}: is open by {pids}: replacing it would cost that process its data")
    tmp = _temporary_beside(target, dest)
    try:
        yield tmp
        _commit(tmp, target, old, clear_side_files=holders is not None, shown=dest)
    except BaseException:
        for path in (tmp, *(Path(f"{tmp}{side}") for side in SQLITE_SIDE_FILES)):
            with contextlib.suppress(OSError):
                path.unlink()
        raise


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror}") from None


def _temporary_beside(target: Path, shown: StrPath) -> Path:
    """Create an empty, private, hidden file beside ``target`` (``.NAME.PID.RANDOM.tmp``) and return its path.

    The name carries this process's id, so that a temporary left by a
    process that was killed (SIGKILL, a power cut) can be told from one
    still being written: those of ``target`` left by dead processes of this
    user are removed first (``_remove_stale_temporaries``).

    Raises OutputError when the folder cannot be made or written.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(target)
        for _attempt in range(100):
            path = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                # O_EXCL and O_NOFOLLOW: never a file someone else made, nor one a planted link points at.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue
            os.close(fd)
            return path
        raise FileExistsError(errno.EEXIST, "no free temporary name", os.fspath(target))
    except OSError as exc:
        raise OutputError(f"{shown}: cannot create: {exc.strerror}") from None


def _remove_stale_temporaries(target: Path) -> None:
    """Remove the temporaries of ``target`` (and their SQLite side files) whose process is gone.

    Only this user's regular files named exactly as ``_temporary_beside``
    names them are candidates; one whose pid is alive is kept. A pid reused
    since keeps a stale file until that process ends too; a process of
    another pid namespace writing the same folder is out of sight and must
    not share the output's name.
    """
    name = re.compile(rf"\.{re.escape(target.name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp(?:-wal|-shm|-journal)?")
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return  # the temporary's own creation reports what is wrong with the folder
    for entry in entries:
        found = name.fullmatch(entry.name)
        if found is None or _process_alive(int(found.group(1))):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(entry.path)
        except OSError:
            continue  # gone already, or not ours to remove


def _process_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a name this module writes: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or no pid at all): not ours to judge
    return True


def _commit(tmp: Path, target: Path, old: os.stat_result | None, *, clear_side_files: bool, shown: StrPath) -> None:
    try:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # the data is on disk before the name points at it
        finally:
            os.close(fd)
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            new = tmp.stat()
            if (old.st_uid, old.st_gid) != (new.st_uid, new.st_gid):
                # Only root may give a file away; anyone else keeps the new file as their own.
                with contextlib.suppress(PermissionError):
                    os.chown(tmp, old.st_uid, old.st_gid)
        else:
            os.chmod(tmp, 0o666 & ~_umask())  # made 0600; a new output is as readable as any new file
        if clear_side_files:
            for side in SQLITE_SIDE_FILES:
                with contextlib.suppress(FileNotFoundError):
                    Path(f"{target}{side}").unlink()
        os.replace(tmp, target)
    except OSError as exc:
        raise OutputError(f"{shown}: cannot write: {exc.strerror or exc}") from None
    _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    # Some file systems cannot fsync a folder; the rename is done either way, so this is best effort.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for a moment, for every thread)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # kernels before 4.7 do not list it
    os.umask(mask)
    return mask


def require_private(path: Path, flag: str) -> None:
    """Refuse a secret (a private key, a token file) that other users can read, as ssh does; UsageError names ``flag``."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot read: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"{flag} {path}: readable by other users", remedy=f"chmod 600 {path}")
