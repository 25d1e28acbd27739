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


def expand_home(path: str | os.PathLike[str]) -> Path:
    """``Path.expanduser``, except that under sudo a leading ``~`` is the invoking user's home."""
    p = Path(path)
    invoker = invoking_user()
    if invoker is not None and p.parts and p.parts[0] == "~":
        return invoker.home.joinpath(*p.parts[1:])
    return p.expanduser()


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


def _load_config_file() -> tuple[Path | None, dict[str, Any]]:
    """Find the first config file that exists and validate its keys; ``(None, {})`` when there is none."""
    explicit = bool(os.environ.get("GPUSCOPE_CONFIG"))
    for path in config_paths():
        try:
            if not path.is_file():
                if explicit:
                    raise UsageError(f"{path}: config file not found", remedy="fix GPUSCOPE_CONFIG")
                continue
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{path}: not UTF-8 text (byte {exc.start})", remedy="save the config file as UTF-8 (TOML requires it)"
            ) from None
        except OSError as exc:
            if explicit:
                raise UsageError(f"{path}: cannot read config: {exc.strerror}") from None
            continue  # e.g. another user's home: not ours to read
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
    fleet = _load_config_file()[1].get("fleet", {})
    return {k: expand_home(fleet[k]) for k in FLEET_FILES if k in fleet}


@dataclass(frozen=True, slots=True)
class DbPath:
    """A recording path and where it came from (``--db``, ``$GPUSCOPE_DB``, a config file, the built-in default)."""

    path: Path
    source: str


def resolve_db_path(flag: str | os.PathLike[str] | None = None) -> DbPath:
    """Decide which recording a command uses: ``--db`` > ``$GPUSCOPE_DB`` > config ``db`` > ``DEFAULT_DB``.

    Args:
        flag: the ``--db`` value as given (None or empty when it was not).

    Raises UsageError for a malformed config file, which is read only when
    neither the flag nor the environment decides.
    """
    if flag:
        return DbPath(Path(flag), "--db")
    env = os.environ.get("GPUSCOPE_DB")
    if env:
        return DbPath(expand_home(env), "$GPUSCOPE_DB")
    config, data = _load_config_file()
    if config is not None and "db" in data:
        return DbPath(expand_home(data["db"]), f"`db` in {config}")
    invoker = invoking_user()
    source = f"the built-in default, in {invoker.name}'s home (sudo)" if invoker else "the built-in default"
    return DbPath(expand_home(DEFAULT_DB), source)
