"""What guards every request, before any route runs: the Host allow-list, the token, size limits, security headers.

One ASGI middleware, outermost, so no route can be reached around it.

- **Host and Origin**: a browser on an attacker's page can be pointed at
  127.0.0.1 by DNS rebinding, but it still sends the attacker's name in
  ``Host``, and a cross-site request carries the page's ``Origin``; only
  loopback names, the bound address and ``--allow-host`` names pass.
- **Token** (Jupyter's convention): ``?token=T`` on a page sets an HttpOnly,
  SameSite=Strict cookie (Secure over TLS) and redirects to the URL without
  the token, so it leaves the address bar and the history; API clients send
  ``Authorization: Bearer T``. The cookie holds an HMAC of the token, not the
  token. Every comparison is constant-time.
- **Headers**: a Content-Security-Policy that allows only the package's own
  script and style, no framing, no referrer, no sniffing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "gpuscope_session"
MAX_BODY_BYTES = 64 * 1024
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


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


class GuardMiddleware:
    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            # No route speaks WebSocket; one that did would need the same checks first.
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        respond = _Responder(send, tls=self.guard.tls)
        if not self.guard.host_allowed(headers.get("host", "")):
            await respond.error(403, "bad_host", "this Host is not served here (see --allow-host)")
            return
        origin = headers.get("origin")
        if origin is not None and not self.guard.host_allowed(urlsplit(origin).netloc):
            # A page of another site calling in (a browser adds Origin to cross-site requests).
            await respond.error(403, "bad_origin", "requests from other sites are refused")
            return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await respond.error(413, "too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query and scope["method"] == "GET" and not scope["path"].startswith("/api/"):
            await self._login(scope, query, respond)
            return
        if not self._authorised(headers):
            await respond.error(
                401, "unauthorized", "open the URL with ?token= printed at start, or send a Bearer token"
            )
            return
        await self.app(scope, _limited(receive), respond.wrap_send)

    def _authorised(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return self.guard.token_ok(auth[7:].strip())
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and self.guard.cookie_ok(value):
                return True
        return False

    async def _login(self, scope: Scope, query: dict[str, str], respond: _Responder) -> None:
        if not self.guard.token_ok(query.get("token")):
            await respond.error(401, "unauthorized", "wrong token: open the URL printed at start")
            return
        rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
        location = scope["path"] + (f"?{rest}" if rest else "")
        secure = "; Secure" if self.guard.tls else ""
        cookie = f"{COOKIE}={cookie_value(self.guard.token)}; Path=/; HttpOnly; SameSite=Strict{secure}"
        await respond.send_raw(303, [(b"location", location.encode()), (b"set-cookie", cookie.encode())], b"")


def _limited(receive: Receive) -> Receive:
    """``receive`` that stops a body longer than MAX_BODY_BYTES sent without a Content-Length (chunked)."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                raise BodyTooLargeError
        return message

    return wrapped


class BodyTooLargeError(Exception):
    """A request body past the limit, found while reading it (mapped to 413 by the app)."""


class _Responder:
    """Sends the guard's own answers, and adds the security headers to every response of the app."""

    def __init__(self, send: Send, *, tls: bool) -> None:
        self.send = send
        self.extra = [
            (b"content-security-policy", CSP.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"no-referrer"),
            (b"x-frame-options", b"DENY"),
            (b"cross-origin-opener-policy", b"same-origin"),
            (b"cross-origin-resource-policy", b"same-origin"),
        ]
        if tls:
            self.extra.append((b"strict-transport-security", b"max-age=86400"))

    async def wrap_send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *self.extra]
        await self.send(message)

    async def send_raw(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        await self.wrap_send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def error(self, status: int, code: str, message: str) -> None:
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="gpuscope"'))
        await self.send_raw(status, headers, error_body(code, message))
