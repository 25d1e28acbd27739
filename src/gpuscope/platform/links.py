"""Follow symlinks in a path the way the kernel's ``fs.protected_symlinks`` would, before writing through it.

A user who can write a shared folder (``/tmp``, any sticky or world-writable
one) can plant ``/tmp/trace.json -> /etc/passwd`` and wait for root to write
``/tmp/trace.json``. The kernel refuses to follow such a link when
``fs.protected_symlinks`` is set, but only for some folders and only on
hosts that set it; gpuscope applies the same rule itself to every path it
writes: a link in a sticky or world-writable folder is followed only when
its owner is the user following it or the folder's owner. Links elsewhere,
and the user's own, are followed as always.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuscope.errors import GpuscopeError

StrPath = str | os.PathLike[str]

MAX_LINKS = 40  # the kernel's limit on links followed in one lookup (ELOOP past it)


class PlantedLinkError(GpuscopeError):
    remedy = "write to a folder only you can write, or have the link removed first"


def resolve_refusing_planted_links(path: StrPath) -> Path:
    """The real path behind ``path`` (as ``os.path.realpath``), refusing links planted by other users.

    Every link met on the way is checked, the last component's and those
    of its folders and of the links' own targets; a dangling link is checked
    as well, since writing through it would create its target. What does not
    exist yet is resolved as far as it goes, as ``realpath`` does.

    Raises PlantedLinkError naming the link, its owner and its folder. A
    loop of links is left unresolved past MAX_LINKS, for the open that
    follows to fail on it.
    """
    given = Path(path).expanduser()
    current = Path(os.getcwd()) if not given.is_absolute() else Path(given.anchor)
    pending = list(reversed(given.parts[1:] if given.is_absolute() else given.parts))
    followed = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent  # ``current`` has no links left in it, so its parent is the real one
            continue
        candidate = current / part
        try:
            st = os.lstat(candidate)
        except OSError:
            current = candidate  # not there (yet): nothing to follow
            continue
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        followed += 1
        if followed > MAX_LINKS:
            # A loop: left unresolved, as realpath leaves it, for the open that follows to fail with ELOOP.
            return Path(candidate, *reversed(pending))
        refuse_planted_link(candidate, st, current)
        try:
            target = Path(os.readlink(candidate))
        except OSError:
            current = candidate  # replaced since the lstat: the open that follows sees what is there now
            continue
        if target.is_absolute():
            current = Path(target.anchor)
            pending.extend(reversed(target.parts[1:]))
        else:
            pending.extend(reversed(target.parts))
    return current


def refuse_planted_link(link: Path, link_stat: os.stat_result, folder: Path) -> None:
    """Raise PlantedLinkError when the link ``link`` (``link_stat`` from lstat) in ``folder`` may not be followed.

    The kernel's rule: a link in a sticky or world-writable folder is
    followed only by its owner, or when the folder's owner owns it too.
    """
    try:
        folder_stat = os.stat(folder)
    except OSError:
        return  # the folder vanished under us: the lookup that follows fails on its own
    shared = folder_stat.st_mode & (stat.S_ISVTX | stat.S_IWOTH)
    if not shared or link_stat.st_uid in (os.geteuid(), folder_stat.st_uid):
        return
    kind = "sticky" if folder_stat.st_mode & stat.S_ISVTX else "world-writable"
    raise PlantedLinkError(
        f"{link}: not following a symlink owned by another user (uid {link_stat.st_uid}) in the {kind} folder "
        f"{folder}: it could point anywhere"
    )


def refuse_planted_side_links(path: Path, suffixes: tuple[str, ...] = ("-wal", "-shm", "-journal")) -> None:
    """Refuse planted links where SQLite will open the side files of the database at ``path`` (its real path).

    SQLite creates and writes ``-wal``, ``-shm`` and ``-journal`` beside a
    database through whatever is at those names.
    """
    for suffix in suffixes:
        side = path.with_name(path.name + suffix)
        try:
            st = os.lstat(side)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            refuse_planted_link(side, st, path.parent)
