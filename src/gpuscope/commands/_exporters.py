"""trace's metrics exporters: ``--prometheus`` (pull) and ``--otlp`` (push), their options, checks and lifetime.

Every option is checked, and every file read, before anything is loaded or
recorded (``plan_exporters``); the exporters start once the session runs
(``start_exporters``) and stop after it finished, so a last scrape or push
sees the whole run.

The rules follow the dashboard's: plain HTTP on loopback only, unless
``--insecure`` says the network is the user's alone. ``/metrics`` elsewhere
is HTTPS (TLS 1.3) with a bearer token; an OTLP collector elsewhere is
reached over HTTPS.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscope.commands._options import duration_ns
from gpuscope.errors import UsageError
from gpuscope.platform.net import is_loopback, split_host_port

if TYPE_CHECKING:
    import ssl

    from gpuscope.exporters.metrics import TraceMetrics
    from gpuscope.exporters.metrics_server import MetricsServer
    from gpuscope.exporters.otlp import OtlpPush

TLS_FILES = ("prometheus_tls_cert", "prometheus_tls_key", "prometheus_ca_cert", "prometheus_token_file")


def add_exporter_options(p: argparse.ArgumentParser) -> None:
    """Add ``--prometheus`` and its TLS and token files, ``--otlp`` and its options, and ``--insecure``."""
    p.add_argument(
        "--prometheus",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on HOST:PORT/metrics while tracing: plain HTTP on loopback; on other "
        "addresses HTTPS with a token (--prometheus-tls-cert, --prometheus-tls-key, $GPUSCOPE_TOKEN or "
        "--prometheus-token-file)",
    )
    p.add_argument(
        "--prometheus-tls-cert", metavar="FILE", help="serve /metrics over HTTPS (TLS 1.3) with this PEM certificate"
    )
    p.add_argument("--prometheus-tls-key", metavar="FILE", help="PEM private key of --prometheus-tls-cert")
    p.add_argument(
        "--prometheus-ca-cert",
        metavar="FILE",
        help="require scrapers to present a client certificate signed by this CA (mutual TLS)",
    )
    p.add_argument(
        "--prometheus-token-file",
        metavar="FILE",
        help="the bearer token scrapers must send: the first line of FILE, private to its owner (default: "
        "$GPUSCOPE_TOKEN; HTTPS only)",
    )
    p.add_argument(
        "--otlp",
        metavar="URL",
        help="push the same metrics to an OpenTelemetry collector over OTLP/HTTP, e.g. https://otel:4318 "
        "(/v1/metrics is added)",
    )
    p.add_argument(
        "--otlp-insecure", action="store_true", help="allow an http:// --otlp URL (loopback only, unless --insecure)"
    )
    p.add_argument("--otlp-interval", metavar="DURATION", help="push every DURATION (default 10s, at least 1s)")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain HTTP beyond loopback: --otlp-insecure to another host, --prometheus on another "
        "address without TLS or token",
    )


@dataclass(frozen=True, slots=True)
class PrometheusPlan:
    host: str
    port: int
    tls: ssl.SSLContext | None
    token: str | None


@dataclass(frozen=True, slots=True)
class OtlpPlan:
    endpoint: str
    interval_ns: int


@dataclass(frozen=True, slots=True)
class ExporterPlan:
    """The exporters asked for, checked; ``None`` where one is not."""

    prometheus: PrometheusPlan | None = None
    otlp: OtlpPlan | None = None


def plan_exporters(args: argparse.Namespace) -> ExporterPlan:
    """Check the exporter options and read their files; raises UsageError naming the option and the fix."""
    return ExporterPlan(_prometheus(args), _otlp(args))


def _prometheus(args: argparse.Namespace) -> PrometheusPlan | None:
    if not args.prometheus:
        given = [f"--{name.replace('_', '-')}" for name in TLS_FILES if getattr(args, name)]
        if given:
            raise UsageError(f"{given[0]} without --prometheus", remedy="add --prometheus HOST:PORT, or drop it")
        return None
    text = args.prometheus
    address = split_host_port(text)
    if address is None:
        raise UsageError(f"--prometheus {text}: expected HOST:PORT", remedy="e.g. --prometheus 127.0.0.1:9464")
    host = address[0] or "0.0.0.0"
    cert, key, ca = args.prometheus_tls_cert, args.prometheus_tls_key, args.prometheus_ca_cert
    if bool(cert) != bool(key):
        raise UsageError("--prometheus-tls-cert and --prometheus-tls-key go together")
    if ca and not cert:
        raise UsageError("--prometheus-ca-cert needs --prometheus-tls-cert and --prometheus-tls-key (HTTPS)")
    if args.prometheus_token_file and not cert:
        raise UsageError(
            "--prometheus-token-file without --prometheus-tls-cert: the token would travel in clear",
            remedy="serve HTTPS with --prometheus-tls-cert FILE --prometheus-tls-key FILE",
        )
    if not cert:
        if not is_loopback(host) and not args.insecure:
            raise UsageError(
                f"--prometheus {text}: metrics beyond loopback are served over HTTPS with a token only",
                remedy="add --prometheus-tls-cert FILE --prometheus-tls-key FILE and a token ($GPUSCOPE_TOKEN or "
                "--prometheus-token-file FILE), or bind 127.0.0.1 (--insecure serves plain HTTP to a network "
                "that is yours alone)",
            )
        _check_can_listen(text, host, address[1])
        return PrometheusPlan(host, address[1], None, None)
    from gpuscope.platform.access import read_token
    from gpuscope.platform.tls import server_context

    found = read_token(args.prometheus_token_file, flag="--prometheus-token-file")
    if found is None:
        raise UsageError(
            f"--prometheus {text}: HTTPS metrics need a token for scrapers to send",
            remedy="set GPUSCOPE_TOKEN (16 characters or more) or add --prometheus-token-file FILE",
        )
    tls = server_context(Path(cert), Path(key), client_ca=Path(ca) if ca else None, flags="--prometheus-")
    _check_can_listen(text, host, address[1])
    return PrometheusPlan(host, address[1], tls, found[0])


def _check_can_listen(text: str, host: str, port: int) -> None:
    """Bind ``host:port`` once and let it go: a taken port is refused before any probe is attached.

    The server binds again when the trace starts (with the same SO_REUSEADDR),
    so a port taken in between is still reported there.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--prometheus {text}: cannot resolve {host}: {exc.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            raise UsageError(
                f"--prometheus {text}: cannot listen: {exc.strerror}", remedy="choose another port"
            ) from None


def _otlp(args: argparse.Namespace) -> OtlpPlan | None:
    if not args.otlp:
        for flag, given in (("--otlp-insecure", args.otlp_insecure), ("--otlp-interval", args.otlp_interval)):
            if given:
                raise UsageError(f"{flag} without --otlp", remedy="add --otlp URL, or drop it")
        return None
    from gpuscope.exporters.otlp import DEFAULT_INTERVAL_NS, MIN_INTERVAL_NS, parse_endpoint

    endpoint = parse_endpoint(args.otlp, insecure=args.otlp_insecure, force=args.insecure)
    interval_ns = DEFAULT_INTERVAL_NS
    if args.otlp_interval:
        interval_ns = duration_ns("--otlp-interval", args.otlp_interval, examples="10s, 30s, 1m")
        if interval_ns < MIN_INTERVAL_NS:
            raise UsageError(f"--otlp-interval {args.otlp_interval}: at least 1s", remedy="e.g. --otlp-interval 10s")
    return OtlpPlan(endpoint, interval_ns)


class RunningExporters:
    """The exporters of one trace, started; ``close()`` stops them and says how the pushes went."""

    def __init__(self, server: MetricsServer | None, push: OtlpPush | None) -> None:
        self.server = server
        self.push = push

    def close(self) -> list[str]:
        """Stop serving and make the last push (bounded); returns lines for trace's summary."""
        if self.server is not None:
            self.server.close()
        return [self.push.close().summary()] if self.push is not None else []


def start_exporters(plan: ExporterPlan, source: TraceMetrics) -> RunningExporters | None:
    """Start what ``plan`` asks for over ``source``; None when it asks for nothing.

    Raises UsageError when the metrics address cannot be bound.
    """
    if plan.prometheus is None and plan.otlp is None:
        return None
    server = None
    if (prom := plan.prometheus) is not None:
        from gpuscope.exporters.metrics import TraceCollector
        from gpuscope.exporters.metrics_server import serve_metrics

        try:
            server = serve_metrics(TraceCollector(source), prom.host, prom.port, tls=prom.tls, token=prom.token)
        except OSError as exc:
            raise UsageError(
                f"--prometheus {prom.host}:{prom.port}: cannot listen: {exc.strerror}", remedy="choose another port"
            ) from None
    push = None
    if plan.otlp is not None:
        from gpuscope.exporters.otlp import OtlpPush

        try:
            push = OtlpPush(source, plan.otlp.endpoint, plan.otlp.interval_ns)
        except BaseException:
            if server is not None:
                with contextlib.suppress(Exception):
                    server.close()
            raise
    return RunningExporters(server, push)
