"""A real OTLP/HTTP metrics receiver for the tests: http.server on loopback, protobuf decoded by opentelemetry-proto."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Receiver:
    """What the receiver was sent: each decoded request, with its path and headers."""

    url: str
    refuse: int = 0  # answer this many first pushes 400 Bad Request (counted in ``refused``, not kept)
    refused: int = 0
    requests: list[ExportMetricsServiceRequest] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def last(self) -> ExportMetricsServiceRequest:
        with self.lock:
            return self.requests[-1]

    def wait_for(self, n: int, timeout_s: float = 30.0) -> None:
        """Wait until ``n`` pushes came in, refused ones included; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                got = len(self.requests) + self.refused
            if got >= n:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the receiver got {got} of {n} pushes")
            time.sleep(0.05)


@contextmanager
def otlp_receiver(refuse: int = 0) -> Iterator[Receiver]:
    """Listen on 127.0.0.1 (a free port) for ``POST /v1/metrics``; yields the receiver, stops it afterwards.

    With ``refuse``, the first pushes get 400 (a rejection the exporter does not retry).
    """
    received: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            receiver = received[0]
            with receiver.lock:
                if receiver.refused < receiver.refuse:
                    receiver.refused += 1
                    self.send_response(400)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                receiver.requests.append(request)
                receiver.paths.append(self.path)
                receiver.content_types.append(self.headers.get("Content-Type", ""))
            answer = ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    received.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}", refuse))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield received[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def resource_attributes(request: ExportMetricsServiceRequest) -> dict[str, Any]:
    (resource_metrics,) = request.resource_metrics
    return {a.key: _value(a.value) for a in resource_metrics.resource.attributes}


def metrics_by_name(request: ExportMetricsServiceRequest) -> dict[str, Any]:
    """name -> the protobuf Metric, over every scope of the request."""
    return {m.name: m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def points(metric: Any) -> list[Any]:
    """The data points of a sum, gauge or histogram metric."""
    return list(getattr(metric, metric.WhichOneof("data")).data_points)


def labels(point: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in point.attributes}


def by_op(metric: Any) -> dict[str, Any]:
    """op -> data point (of a metric labelled by op)."""
    return {labels(p)["op"]: p for p in points(metric)}
