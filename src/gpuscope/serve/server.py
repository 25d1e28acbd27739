"""What the dashboard and the MCP server share to listen: address, token, TLS, socket, and the uvicorn run.

Both serve HTTPS with TLS 1.3 only, the same self-signed certificate (or the
user's), the same token rules and the same Guard in front of the app.
"""

from __future__ import annotations

import argparse
import secrets
import socket
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope.config import expand_home
from gpuscope.errors import UsageError
from gpuscope.platform.access import Guard, allowed_host_names, read_token
from gpuscope.platform.net import is_loopback, split_host_port

DEFAULT_ADDR = "127.0.0.1:8080"
TLS_DIR = "~/.gpuscope/tls"


def add_server_options(
    p: argparse.ArgumentParser, *, default_addr: str = DEFAULT_ADDR, addr_flag: str = "--addr", addr_help: str = ""
) -> None:
    """The options both servers take: the address, TLS files, mutual TLS, the token, Host names, plain HTTP."""
    p.add_argument(
        addr_flag,
        dest="addr",
        default=default_addr,
        metavar="HOST:PORT",
        help=addr_help or f"where to listen (default {default_addr}; port 0 picks a free one)",
    )
    p.add_argument("--tls-cert", metavar="FILE", help=f"PEM certificate (default: a self-signed one in {TLS_DIR})")
    p.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    p.add_argument("--ca-cert", metavar="FILE", help="require client certificates signed by this CA (mutual TLS)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="read the access token from FILE (default: $GPUSCOPE_TOKEN, else a new random one per start)",
    )
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help="also accept this Host header (repeatable)"
    )
    p.add_argument("--no-tls", action="store_true", help="plain HTTP (loopback addresses only, unless --insecure)")
    p.add_argument("--insecure", action="store_true", help="allow --no-tls on an address other than loopback")


@dataclass
class Listener:
    """A bound socket and what a client needs to reach it."""

    sock: socket.socket
    guard: Guard
    ssl: ssl.SSLContext | None
    base_url: str
    token: str
    token_source: str
    fingerprint: str | None
    mutual_tls: bool

    def info(self, **extra: Any) -> dict[str, Any]:
        return {
            "url": f"{self.base_url}?token={self.token}",
            **extra,
            "token": self.token,  # for a client's Authorization: Bearer header, as --help promises
            "token_source": self.token_source,
            "tls": self.ssl is not None,
            "mutual_tls": self.mutual_tls,
            "fingerprint_sha256": self.fingerprint,
        }


def listen(args: argparse.Namespace) -> Listener:
    """Check the options, make or load the certificate, resolve the token and bind; raises UsageError."""
    host, port = _split_addr(args.addr)
    if args.no_tls and not is_loopback(host) and not args.insecure:
        raise UsageError(
            f"--no-tls on {host}: plain HTTP would send the token and the data in clear over the network",
            remedy="keep TLS (the default), bind 127.0.0.1, or add --insecure if the network is yours alone",
        )
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.no_tls and (args.tls_cert or args.ca_cert):
        raise UsageError("--no-tls cannot be combined with --tls-cert or --ca-cert")
    token, token_source = _token(args)
    ssl_ctx, fingerprint = _tls(args, host)
    sock = _listen(host, port)
    scheme = "https" if ssl_ctx is not None else "http"
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    base = f"{scheme}://{'[' + shown + ']' if ':' in shown else shown}:{sock.getsockname()[1]}/"
    guard = Guard(
        token, allowed_host_names(host, args.allow_host), tls=ssl_ctx is not None, client_certified=bool(args.ca_cert)
    )
    return Listener(sock, guard, ssl_ctx, base, token, token_source, fingerprint, bool(args.ca_cert))


def serve(
    app: Callable[..., Any], listener: Listener, *, verbose: int = 0, on_ready: Callable[[], None] | None = None
) -> None:
    """Run ``app`` with uvicorn on the listener's socket, with our TLS context, until Ctrl-C or SIGTERM.

    ``on_ready`` runs once the server has started (the start line: whoever waits for it may ask at once).
    """
    import anyio.to_thread
    import uvicorn

    # The thread hand-off every request takes imports most of anyio the first time (about 40 ms): before
    # serving, so the first requests (a fleet client's, to many fresh agents at once) do not wait for it.
    anyio.run(anyio.to_thread.run_sync, lambda: None)
    from gpuscope.serve.protocol import GuardedH11Protocol
    from gpuscope.serve.security import MAX_HEADER_BYTES

    config = uvicorn.Config(
        app,
        # h11 with a deadline for each request and JSON for malformed HTTP (serve/protocol.py), whatever
        # else is installed (uvicorn would pick httptools when it is).
        http=GuardedH11Protocol,
        # asyncio's loop with a deadline for each TLS handshake (uvloop, where installed, would have none).
        loop="gpuscope.serve.protocol:GuardedLoop",
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        ws="none",  # no route speaks WebSocket: an upgrade request is an HTTP request like any other
        log_level="info" if verbose else "warning",
        access_log=bool(verbose),
        server_header=False,
        proxy_headers=False,
        lifespan="on",
        timeout_graceful_shutdown=3,
    )
    config.load()
    # uvicorn's own TLS settings cannot say "1.3 only" or demand client certificates: ours replaces them.
    config.ssl = listener.ssl

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready()

    Server(config).run(sockets=[listener.sock])


def print_start(what: str, listener: Listener, lines: list[str]) -> None:
    print(f"gpuscope {what}", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    if listener.fingerprint:
        print(f"  TLS certificate SHA-256 {listener.fingerprint}", file=sys.stderr)
    print("Ctrl-C to stop.", file=sys.stderr, flush=True)


def _split_addr(text: str) -> tuple[str, int]:
    address = split_host_port(text)
    if address is None:
        raise UsageError(f"--addr {text}: expected HOST:PORT", remedy=f"e.g. {DEFAULT_ADDR} or [::1]:8443")
    return address[0] or "0.0.0.0", address[1]


def _token(args: argparse.Namespace) -> tuple[str, str]:
    """The token and where it came from."""
    return read_token(args.token_file) or (secrets.token_urlsafe(32), "new for this start")


def _tls(args: argparse.Namespace, host: str) -> tuple[ssl.SSLContext | None, str | None]:
    if args.no_tls:
        return None, None
    from gpuscope.platform.tls import fingerprint, self_signed, server_context

    if args.tls_cert:
        cert, key = Path(args.tls_cert), Path(args.tls_key)
        try:
            fp = fingerprint(cert.read_bytes())
        except (OSError, ValueError) as exc:
            raise UsageError(f"--tls-cert {cert}: not a readable PEM certificate ({exc})") from None
    else:
        made = self_signed(expand_home(TLS_DIR), ["localhost", "127.0.0.1", "::1", socket.gethostname(), host])
        cert, key, fp = made.cert, made.key, made.fingerprint
    ca = Path(args.ca_cert) if args.ca_cert else None
    return server_context(cert, key, client_ca=ca), fp


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted connections: without it a small answer written in two parts waits ~40 ms
    # for the client's delayed ACK (Nagle's algorithm).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"--addr {host}:{port}: cannot listen: {exc.strerror}", remedy="choose another port") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
