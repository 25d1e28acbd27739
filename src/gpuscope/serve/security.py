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
- **Sizes**: the request line and headers up to ``MAX_HEADER_BYTES`` in
  ``MAX_HEADERS`` lines; the body up to ``MAX_BODY_BYTES``, read whole here
  before any route runs (a chunked body or a lying Content-Length is cut off
  as it arrives, for every route, the MCP app's too); at most
  ``MAX_IN_FLIGHT`` requests at once (the rest are refused with 503 at once,
  not queued). How long a request may take to arrive is bounded by the
  connection (``gpuscope.serve.protocol``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from gpuscope.platform.access import COOKIE, Guard, cookie_value, error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 64 * 1024
MAX_HEADER_BYTES = 16 * 1024  # the request line and headers together (h11's own default for what it buffers)
MAX_HEADERS = 100
MAX_IN_FLIGHT = 128
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class GuardMiddleware:
    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            # No route speaks WebSocket; one that did would need the same checks first.
            await send({"type": "websocket.close", "code": 1008})
            return
        raw_headers = scope.get("headers", [])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
        respond = _Responder(send, tls=self.guard.tls)
        head_bytes = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
        head_bytes += sum(len(k) + len(v) for k, v in raw_headers)
        if len(raw_headers) > MAX_HEADERS or head_bytes > MAX_HEADER_BYTES:
            # h11 bounds only what it buffers while a request is incomplete: a request that arrives in one
            # read is parsed whatever its size.
            await respond.error(
                431, "headers_too_large", f"at most {MAX_HEADERS} headers, {MAX_HEADER_BYTES} bytes with the URL"
            )
            return
        if not self.guard.host_allowed(headers.get("host", "")):
            await respond.error(403, "bad_host", "this Host is not served here (see --allow-host)")
            return
        origin = headers.get("origin")
        if origin is not None and not self.guard.origin_allowed(origin):
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
        if self.in_flight >= MAX_IN_FLIGHT:
            await respond.error(503, "busy", f"more than {MAX_IN_FLIGHT} requests at once: try again shortly")
            return
        self.in_flight += 1
        try:
            try:
                body = await _read_body(receive)
            except BodyTooLargeError:
                await respond.error(413, "too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
                return
            if body is not None:  # None: the client left before its body arrived; nobody reads an answer
                await self.app(scope, _replay(body, receive), respond.wrap_send)
        finally:
            self.in_flight -= 1

    def _authorised(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return self.guard.token_ok(auth[7:].strip())  # a token that is sent must be the right one
        if self.guard.client_certified:
            return True  # the handshake checked the client's certificate against --ca-cert
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
        # Percent-encoded again (a decoded %0d%0a would end the header; a backslash reads as a slash to a
        # browser), and never `//host/...`, which a browser reads as another site.
        path = "/" + quote(scope["path"].lstrip("/"), safe="/:@!$&'()*+,;=~")
        location = path + (f"?{rest}" if rest else "")
        secure = "; Secure" if self.guard.tls else ""
        cookie = f"{COOKIE}={cookie_value(self.guard.token)}; Path=/; HttpOnly; SameSite=Strict{secure}"
        await respond.send_raw(303, [(b"location", location.encode()), (b"set-cookie", cookie.encode())], b"")


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body; None when the client disconnects first; BodyTooLargeError past MAX_BODY_BYTES."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the app: the body read already, then what the connection says next (a disconnect)."""
    pending = True

    async def wrapped() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped


class BodyTooLargeError(Exception):
    """A request body past the limit, found while reading it (answered with 413)."""


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
