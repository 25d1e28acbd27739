"""Who may use gpuscope's HTTP servers: the token, the session cookie made from it, the Host allow-list,
and the one error shape. Shared by the dashboard (``gpuscope.serve``) and the trace-time metrics server
(``gpuscope.exporters``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
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
        name = host.strip().lower()
        if name.startswith("["):  # [::1]:8080
            name = name[: name.find("]") + 1]
        elif name.count(":") == 1:
            name = name.rsplit(":", 1)[0]
        return name in self.allowed_hosts or name in LOOPBACK_NAMES

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def cookie_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), cookie_value(self.token).encode())


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
