"""The optional config file: ``$GPUSCOPE_CONFIG``, ``~/.config/gpuscope/config.toml``
or ``/etc/gpuscope/config.toml``.

Recognised keys: ``node`` (node name stored with every event), ``db``
(default recording path) and a ``[fleet]`` table with ``nodes`` (the
dashboards ``--fleet`` asks) and ``ca_cert``, ``client_cert``, ``client_key``. Command-line flags and ``$GPUSCOPE_DB`` win over
the file; ``resolve_db_path`` is the one place that order is decided.

Under ``sudo``, ``~`` is the home of the user who ran sudo, not root's: only
``trace`` needs privileges, so ``sudo gpuscope trace`` must record where the
same user's ``gpuscope explain`` looks (``invoking_user``).
"""

from __future__ import annotations

import os
import pwd
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope.errors import UsageError

KNOWN_KEYS = {"node", "db", "fleet"}
FLEET_FILES = {"ca_cert", "client_cert", "client_key"}
DEFAULT_DB = "~/.gpuscope/gpuscope.db"


@dataclass(frozen=True, slots=True)
class Invoker:
    """The user behind ``sudo``: whose home the defaults live in and who owns what root records there."""

    name: str
    uid: int
    gid: int
    home: Path


def invoking_user() -> Invoker | None:
    """The user who ran ``sudo gpuscope ...`` when this process is root through sudo; None otherwise.

    sudo sets ``SUDO_USER`` and ``SUDO_UID``; both must name the same account
    in the password database, or the environment is not sudo's and is ignored.
    """
    name, uid = os.environ.get("SUDO_USER"), os.environ.get("SUDO_UID")
    if os.geteuid() != 0 or not name or not uid or uid == "0":
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    if str(entry.pw_uid) != uid or not entry.pw_dir:
        return None
    return Invoker(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def expand_home(path: str | os.PathLike[str], where: str = "") -> Path:
    """``Path.expanduser``, except that under sudo a leading ``~`` is the invoking user's home.

    Paths a user gives (options, ``$GPUSCOPE_DB``, the config file) are
    expanded here. ``where`` names the option or setting the path came from
    (``--db``, ``$GPUSCOPE_DB``), for the message.

    Raises UsageError for ``~name`` of a user the system does not know, or a
    ``~`` without a home (Path.expanduser raises RuntimeError for both).
    """
    p = Path(path)
    if not p.parts or not p.parts[0].startswith("~"):
        return p
    invoker = invoking_user()
    if invoker is not None and p.parts[0] == "~":
        return invoker.home.joinpath(*p.parts[1:])
    try:
        return p.expanduser()
    except RuntimeError:
        given = f"{where} {os.fspath(path)}" if where else os.fspath(path)
        if p.parts[0] == "~":
            raise UsageError(
                f"{given}: ~: no home directory ($HOME is unset and this user has no passwd entry)",
                remedy="set HOME, or give the path without ~",
            ) from None
        raise UsageError(
            f"{given}: {p.parts[0]}: no such user", remedy="give the path without ~, or name a user that exists"
        ) from None


def config_paths() -> list[Path]:
    env = os.environ.get("GPUSCOPE_CONFIG")
    if env:
        return [Path(env)]
    return [expand_home("~/.config/gpuscope/config.toml"), Path("/etc/gpuscope/config.toml")]


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(
                f"{path}: malformed config: {exc}", remedy="fix the file or unset GPUSCOPE_CONFIG"
            ) from None
        except RecursionError:
            # tomllib parses arrays and inline tables recursively: thousands of nested `[` exhaust the stack.
            raise UsageError(
                f"{path}: malformed config: arrays or tables nested too deeply",
                remedy="fix the file or unset GPUSCOPE_CONFIG",
            ) from None
    out: dict[str, Any] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        value = value.strip()
        if not sep or len(value) < 2 or value[0] != value[-1] or value[0] not in "\"'":
            raise UsageError(f'{path}:{n}: malformed config line (expected key = "value")')
        out[key.strip()] = value[1:-1]
    return out


def load_config() -> dict[str, Any]:
    """Load the first config file that exists, validated; {} when there is none."""
    return _load_config_file()[1]


class _Unreadable(Exception):
    """Something is at a config location, but not a config file gpuscope can read (the message says why)."""


def _read_config_bytes(path: Path) -> bytes | None:
    """The bytes of the config file at ``path``; None when nothing is there. Raises _Unreadable.

    A folder, FIFO, socket or device is refused from its ``stat``, before any
    open: reading a FIFO would wait for a writer forever. The file is then
    opened without blocking and checked again, in case it was replaced meanwhile.
    """
    try:
        kind = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _Unreadable(f"cannot read config: {exc.strerror}") from None
    if not stat.S_ISREG(kind):
        raise _Unreadable(_not_a_file(kind))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _Unreadable(f"cannot read config: {exc.strerror}") from None
    with open(fd, "rb") as f:
        kind = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(kind):
            raise _Unreadable(_not_a_file(kind))
        try:
            return f.read()
        except OSError as exc:
            raise _Unreadable(f"cannot read config: {exc.strerror}") from None


def _not_a_file(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder, not a config file"
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return f"{kind}, not a regular file (a config file is read whole, as TOML)"


def unread_config_files() -> list[str]:
    """Why each default config location that holds something gpuscope cannot read was passed over (one line each).

    Only the locations searched before a readable file: those after it are
    never read. Empty with ``$GPUSCOPE_CONFIG`` set (its file is read or
    refused, never passed over). The command line says these once, as warnings.
    """
    if os.environ.get("GPUSCOPE_CONFIG"):
        return []
    skipped: list[str] = []
    for path in config_paths():
        try:
            if _read_config_bytes(path) is not None:
                break
        except _Unreadable as exc:
            skipped.append(f"{path}: {exc}; config file not read")
    return skipped


def _load_config_file() -> tuple[Path | None, dict[str, Any]]:
    """Find the first config file that exists and validate its keys; ``(None, {})`` when there is none.

    A default location that holds something unreadable (another user's
    home, a folder, a FIFO) is passed over (``unread_config_files`` says why);
    ``$GPUSCOPE_CONFIG`` naming one is a UsageError.
    """
    explicit = bool(os.environ.get("GPUSCOPE_CONFIG"))
    for path in config_paths():
        try:
            raw = _read_config_bytes(path)
        except _Unreadable as why_not:
            if explicit:
                raise UsageError(f"{path}: {why_not}", remedy="point GPUSCOPE_CONFIG at a readable TOML file") from None
            continue
        if raw is None:
            if explicit:
                raise UsageError(f"{path}: config file not found", remedy="fix GPUSCOPE_CONFIG")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{path}: not UTF-8 text (byte {exc.start})", remedy="save the config file as UTF-8 (TOML requires it)"
            ) from None
        data = _parse_toml(text, path)
        unknown = set(data) - KNOWN_KEYS
        if unknown:
            raise UsageError(
                f"{path}: unknown config keys: {', '.join(sorted(unknown))}",
                remedy=f"known keys: {', '.join(sorted(KNOWN_KEYS))}",
            )
        for key in {"node", "db"} & set(data):
            if not isinstance(data[key], str) or not data[key]:
                raise UsageError(f"{path}: `{key}` must be a non-empty string")
        fleet = data.get("fleet", {})
        nodes = fleet.get("nodes", []) if isinstance(fleet, dict) else None
        if nodes is None or not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
            raise UsageError(f'{path}: [fleet] must hold nodes = ["host:port", …]')
        unknown_fleet = set(fleet) - {"nodes", *FLEET_FILES}
        if unknown_fleet or not all(isinstance(fleet[k], str) and fleet[k] for k in FLEET_FILES & set(fleet)):
            raise UsageError(
                f"{path}: [fleet] takes nodes and the file paths {', '.join(sorted(FLEET_FILES))}",
                remedy=f"unknown: {', '.join(sorted(unknown_fleet))}" if unknown_fleet else "paths are strings",
            )
        if "node" in data:
            check_node_name(data["node"], f"{path}: node")
        return path, data
    return None, {}


MAX_NODE_NAME = 253  # a DNS name's longest: node names are host names or Kubernetes node names


def check_node_name(name: str, where: str) -> str:
    """``name`` when it can name a node (stored with every event, shown in every view); raises UsageError."""
    if not name.strip():
        raise UsageError(f"{where} {name!r}: a node name must not be empty")
    if ":" in name:
        raise UsageError(f"{where} {name!r}: a node name may not contain ':' (it separates node and id in event ids)")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise UsageError(f"{where} {name!r}: a node name may not contain control characters (NUL, newlines, …)")
    if len(name) > MAX_NODE_NAME:
        raise UsageError(f"{where}: a node name of {len(name):,} characters (at most {MAX_NODE_NAME})")
    return name


def fleet_nodes() -> list[str]:
    """The ``nodes`` of the config file's ``[fleet]`` table ([] when there is none)."""
    nodes = _load_config_file()[1].get("fleet", {}).get("nodes", [])
    return [str(n) for n in nodes]


def fleet_files() -> dict[str, Path]:
    """The TLS files of the config file's ``[fleet]`` table: ``ca_cert``, ``client_cert``, ``client_key``."""
    config, data = _load_config_file()
    fleet = data.get("fleet", {})
    return {k: expand_home(fleet[k], f"{config}: [fleet] {k} =") for k in FLEET_FILES if k in fleet}


@dataclass(frozen=True, slots=True)
class DbPath:
    """A recording path and where it came from (``--db``, ``$GPUSCOPE_DB``, a config file, the built-in default)."""

    path: Path
    source: str


def resolve_db_path(flag: str | os.PathLike[str] | None = None) -> DbPath:
    """Decide which recording a command uses: ``--db`` > ``$GPUSCOPE_DB`` > config ``db`` > ``DEFAULT_DB``.

    Args:
        flag: the ``--db`` value as given (None or empty when it was not).

    Every source's ``~`` is expanded (``expand_home``). Raises UsageError for
    a malformed config file, which is read only when neither the flag nor the
    environment decides, and for a ``~user`` the system does not know.
    """
    if flag:
        return DbPath(expand_home(flag, "--db"), "--db")
    env = os.environ.get("GPUSCOPE_DB")
    if env:
        return DbPath(expand_home(env, "$GPUSCOPE_DB"), "$GPUSCOPE_DB")
    config, data = _load_config_file()
    if config is not None and "db" in data:
        return DbPath(expand_home(data["db"], f"{config}: db ="), f"`db` in {config}")
    invoker = invoking_user()
    source = f"the built-in default, in {invoker.name}'s home (sudo)" if invoker else "the built-in default"
    return DbPath(expand_home(DEFAULT_DB), source)
