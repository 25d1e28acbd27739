"""The ``/metrics`` endpoint of a running trace: plain HTTP on loopback, or HTTPS with a bearer token elsewhere.

Served by ``prometheus_client``'s WSGI app on a thread per request. With a
TLS context (``serve.tls.server_context``: TLS 1.3 only, client certificates
on request) the handshake runs on the request's thread with a deadline, so a
client that connects and says nothing holds no one else up; a client that
speaks plain HTTP to it gets its connection closed. With a token, a request
without ``Authorization: Bearer TOKEN`` gets 401 and the API's error shape.
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
from gpuscope.platform.access import Guard, error_body

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
