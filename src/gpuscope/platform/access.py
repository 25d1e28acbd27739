"""Who may use gpuscope's HTTP servers: the token, the session cookie made from it, the Host allow-list,
and the one error shape. Shared by the dashboard (``gpuscope.serve``) and the trace-time metrics server
(``gpuscope.exporters``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.errors import UsageError
from gpuscope.platform.files import require_private

COOKIE = "gpuscope_session"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost")


def error_body(code: str, message: str) -> bytes:
    """The one error shape of the API: ``{"error": {"code", "message"}}``."""
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def cookie_value(token: str) -> str:
    """What the session cookie holds: an HMAC of the token (the token itself never goes into a cookie)."""
    return hmac.new(token.encode(), b"gpuscope dashboard session", hashlib.sha256).hexdigest()


@dataclass
class Guard:
    """The middleware's settings: the token, the allowed Host names, and whether the server speaks TLS."""

    token: str
    allowed_hosts: set[str] = field(default_factory=set)
    tls: bool = True
    # Mutual TLS (--ca-cert): no connection gets past the handshake without a certificate from that CA, so
    # the certificate authenticates the client, and a fleet client needs no token besides it.
    client_certified: bool = False

    def host_allowed(self, host: str) -> bool:
        """Whether a ``Host`` header names this server: ``name[:port]`` exactly, the name allowed."""
        name = host_name(host)
        return name is not None and (name in self.allowed_hosts or name in LOOPBACK_NAMES)

    def origin_allowed(self, origin: str) -> bool:
        """Whether an ``Origin`` header is a page of this server: ``http(s)://name[:port]`` exactly, the name allowed."""
        scheme, sep, rest = origin.strip().partition("://")
        return bool(sep) and scheme.lower() in ("http", "https") and self.host_allowed(rest)

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def cookie_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), cookie_value(self.token).encode())


# A Host header's value: a DNS name or IPv4 address, or an IPv6 address in brackets, then an optional port.
# Anything else (user info before an @, a path, a name that goes on after the port) names another host.
_HOST = re.compile(r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?)(?::(?P<port>[0-9]{1,5}))?")


def host_name(value: str) -> str | None:
    """The host name of a ``Host`` header's value (lower case; IPv6 in brackets), or None when it is not one."""
    m = _HOST.fullmatch(value.strip().lower())
    if m is None or (m["port"] is not None and int(m["port"]) > 65535):
        return None
    return m["name"]


def is_ip_literal(name: str) -> bool:
    """Whether a host name is an address, not a DNS name (a DNS-rebinding page always arrives under a name)."""
    try:
        ipaddress.ip_address(name[1:-1] if name.startswith("[") else name)
    except ValueError:
        return False
    return True


def allowed_host_names(bound: str, extra: Iterable[str]) -> set[str]:
    """The Host names to accept: the bound address (unless a wildcard) and the ``--allow-host`` names."""
    names = {h.strip().lower() for h in extra if h.strip()}
    if bound not in ("0.0.0.0", "::", ""):
        names.add(bound.lower())
        names.add(f"[{bound.lower()}]")
    return names


def read_token(token_file: str | None, *, flag: str = "--token-file") -> tuple[str, str] | None:
    """The token from ``token_file`` (private, first line), else ``$GPUSCOPE_TOKEN``, and where it came from.

    None when neither is given. Raises UsageError, naming ``flag``, for a file
    others can read or a token under 16 characters.
    """
    if token_file:
        path = Path(token_file)
        require_private(path, flag)
        try:
            text = path.read_text().strip().splitlines()
        except OSError as exc:
            raise UsageError(f"{flag} {path}: cannot read: {exc.strerror}") from None
        if not text or len(text[0]) < 16:
            raise UsageError(f"{flag} {path}: the first line must hold a token of at least 16 characters")
        return text[0], flag
    env = os.environ.get("GPUSCOPE_TOKEN", "").strip()
    if env:
        if len(env) < 16:
            raise UsageError("$GPUSCOPE_TOKEN: at least 16 characters")
        return env, "$GPUSCOPE_TOKEN"
    return None
