"""The ``/metrics`` endpoint of a running trace: plain HTTP on loopback, or HTTPS with a bearer token elsewhere.

Served by ``prometheus_client``'s WSGI app on a thread per request. With a
TLS context (``serve.tls.server_context``: TLS 1.3 only, client certificates
on request) the handshake runs on the request's thread with a deadline, so a
client that connects and says nothing holds no one else up; a client that
speaks plain HTTP to it gets its connection closed. With a token, a request
without ``Authorization: Bearer TOKEN`` gets 401 and the API's error shape; without one, a request whose
Host or Origin is a DNS name other than the bound one gets 403 (DNS rebinding).
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from gpuscope.exporters.metrics import TraceCollector
from gpuscope.platform.access import Guard, allowed_host_names, error_body, host_name, is_ip_literal

# A scrape is one small request: a client slower than this is gone or hostile.
REQUEST_TIMEOUT_S = 10.0

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class MetricsServer:
    """A running ``/metrics`` server; ``close()`` stops it and frees the port."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=REQUEST_TIMEOUT_S)


def serve_metrics(
    collector: TraceCollector,
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None = None,
    token: str | None = None,
) -> MetricsServer:
    """Serve ``collector`` on ``host:port`` in a thread (port 0 picks a free one).

    Args:
        tls: serve HTTPS with this context (None: plain HTTP).
        token: demand ``Authorization: Bearer TOKEN`` on every request (None: no token).

    Raises OSError when the address cannot be bound.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    app: WsgiApp = make_wsgi_app(registry)
    if token is not None:
        app = _bearer_only(app, Guard(token))
    else:
        # No token: a page a browser opened elsewhere may be pointed at this port under a name of its own
        # (DNS rebinding) and read the node's names and counts; the Host is the guard. With a token, the
        # token is: such a page cannot send it.
        app = _this_host_only(app, Guard("", allowed_host_names(host, ())))

    class Server(_TlsWsgiServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        context = tls

    httpd = make_server(host, port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="gpuscope-metrics", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)


class _TlsWsgiServer(ThreadingMixIn, WSGIServer):
    """A thread per request; with ``context``, the TLS handshake on that thread, not the accepting one."""

    daemon_threads = True  # a scrape in progress does not hold the trace's exit
    context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(REQUEST_TIMEOUT_S)
        try:
            wrapped = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # plain HTTP, an old TLS version, no client certificate: closed, nothing served
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (it belongs to the trace's live view); a deadline on each request."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _this_host_only(app: WsgiApp, guard: Guard) -> WsgiApp:
    """``app`` for requests whose Host (and Origin, when sent) is the bound address, a loopback name or an address.

    A DNS-rebinding page arrives under a DNS name of its own; a scraper by address or on loopback never does.
    """

    def allowed(value: str, *, origin: bool) -> bool:
        if origin:
            scheme, sep, value = value.strip().partition("://")
            if not sep or scheme.lower() not in ("http", "https"):
                return False
        name = host_name(value)
        return name is not None and (guard.host_allowed(value) or is_ip_literal(name))

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        origin = environ.get("HTTP_ORIGIN")
        if allowed(str(environ.get("HTTP_HOST", "")), origin=False) and (
            origin is None or allowed(str(origin), origin=True)
        ):
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "application/json"), ("Cache-Control", "no-store")])
        return [error_body("bad_host", "this Host or Origin is not served here: scrape by address or on loopback")]

    return guarded


def _bearer_only(app: WsgiApp, guard: Guard) -> WsgiApp:
    """``app`` behind a bearer token, compared in constant time (``Guard.token_ok``)."""

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        auth = str(environ.get("HTTP_AUTHORIZATION", ""))
        if auth[:7].lower() == "bearer " and guard.token_ok(auth[7:].strip()):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "application/json"),
                ("Cache-Control", "no-store"),
                ("WWW-Authenticate", 'Bearer realm="gpuscope"'),
            ],
        )
        return [error_body("unauthorized", "send Authorization: Bearer TOKEN, the token the trace was started with")]

    return guarded
