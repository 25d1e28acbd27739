"""Push a trace's metrics to an OpenTelemetry collector over OTLP/HTTP (protobuf), the names Prometheus shows.

The metrics are observable instruments of the OpenTelemetry SDK whose
callbacks read one ``TraceMetrics`` snapshot per collection, the snapshot
the Prometheus collector reads at a scrape. The call-duration histogram is
already aggregated (the live histograms), which no SDK instrument can
report without re-sampling it; the push's exporter adds it to the
collection from the same snapshot, as an explicit-bucket histogram with the
Prometheus bounds and exact counts, sum, min and max. Everything is
cumulative, as in Prometheus: a push the collector misses loses one point in
time, not counts, since the next one carries the totals.

The SDK's reader thread collects and pushes; tracing never waits for it. A
push gives up after a short deadline (retries included) and is counted as
failed, with its data points as dropped: ``gpuscope_otlp_exports_failed``
and ``gpuscope_otlp_points_dropped``, and a line in trace's summary.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.resources import OTELResourceDetector, Resource

from gpuscope._version import __version__
from gpuscope.agent.identity import cgroup_paths, parse_cgroup_path, rank_info
from gpuscope.errors import UsageError
from gpuscope.exporters.metrics import BUCKET_BOUNDS_S, EventRate, MetricsSnapshot, TraceMetrics
from gpuscope.platform.net import is_loopback

DEFAULT_INTERVAL_NS = 10_000_000_000
MIN_INTERVAL_NS = 1_000_000_000
# One push, its retries included, ends within this (or the interval, if shorter): a collector that is
# away costs a failed push, never a queue.
MAX_EXPORT_TIMEOUT_S = 5.0
SIGNAL_PATH = "/v1/metrics"
SCOPE = "gpuscope"


def parse_endpoint(text: str, *, insecure: bool = False, force: bool = False) -> str:
    """``--otlp URL`` as the URL pushed to: ``https://HOST[:PORT][/PATH]``, ending in ``/v1/metrics``.

    A URL that does not end in ``/v1/metrics`` is a base, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is: the signal's path is added.

    Args:
        insecure: ``--otlp-insecure``: allow ``http://``, to a loopback host.
        force: ``--insecure``: allow ``http://`` to any host.

    Raises UsageError for anything else.
    """
    parts = urlsplit(text.strip())
    scheme = parts.scheme.lower()
    try:
        parts.port  # noqa: B018  (reading it validates it)
        ok = scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(
            f"--otlp {text}: expected an http(s) URL of an OTLP/HTTP receiver", remedy="e.g. --otlp https://otel:4318"
        )
    host = parts.hostname or ""
    if parts.username is not None or parts.password is not None:
        raise UsageError(
            f"--otlp {text}: credentials in the URL would be shown wherever the URL is",
            remedy="send them as headers: OTEL_EXPORTER_OTLP_HEADERS='authorization=Bearer TOKEN'",
        )
    if scheme == "https" and insecure:
        raise UsageError(f"--otlp {text}: --otlp-insecure is for http:// URLs", remedy="drop --otlp-insecure")
    if scheme == "http" and not insecure:
        raise UsageError(
            f"--otlp {text}: plain http:// would send the metrics in clear",
            remedy="use https://, or add --otlp-insecure for a collector on this machine (127.0.0.1)",
        )
    if scheme == "http" and not is_loopback(host) and not force:
        raise UsageError(
            f"--otlp {text}: --otlp-insecure is for a collector on loopback, and {host} is not",
            remedy="use https://, run the collector on 127.0.0.1, or add --insecure if the network is yours alone",
        )
    path = parts.path.rstrip("/")
    if not path.endswith(SIGNAL_PATH):
        path += SIGNAL_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def resource_attributes(node: str, env: Mapping[str, str] | None = None) -> dict[str, str | int]:
    """Who pushes: service, node, and what Kubernetes, the launcher and the cgroup say about where it runs.

    ``host.name`` is the trace's node name. Kubernetes names come from the
    downward API's usual variables (``NODE_NAME``, ``POD_NAME``,
    ``POD_NAMESPACE``), the cluster from ``GPUSCOPE_CLUSTER``, the rank from
    ``GPUSCOPE_RANK`` or the launcher's variables (``RANK``,
    ``SLURM_PROCID``, …), the container from this process's cgroup. The
    OpenTelemetry variables (``OTEL_RESOURCE_ATTRIBUTES``,
    ``OTEL_SERVICE_NAME``) override any of these when the push starts.
    """
    env = os.environ if env is None else env
    attrs: dict[str, str | int] = {"service.name": "gpuscope", "service.version": __version__, "host.name": node}
    for key, names in (
        ("k8s.node.name", ("NODE_NAME", "K8S_NODE_NAME")),
        ("k8s.pod.name", ("POD_NAME", "K8S_POD_NAME")),
        ("k8s.namespace.name", ("POD_NAMESPACE", "K8S_NAMESPACE")),
        ("gpuscope.cluster", ("GPUSCOPE_CLUSTER",)),
    ):
        value = next((env[n].strip() for n in names if env.get(n, "").strip()), None)
        if value:
            attrs[key] = value
    rank = env.get("GPUSCOPE_RANK", "").strip()
    if rank.isdigit():
        attrs["gpuscope.rank"] = int(rank)
    elif (launched := rank_info(dict(env)).rank) is not None:
        attrs["gpuscope.rank"] = launched
    paths = cgroup_paths(os.getpid())
    container = parse_cgroup_path(paths.get("v2") or paths.get("v1:memory") or "")["container_id"]
    if container:
        attrs["container.id"] = container
    return attrs


@dataclass(frozen=True, slots=True)
class PushReport:
    """How the pushes went, for trace's summary."""

    endpoint: str
    pushes: int
    failed: int
    points_dropped: int
    last_error: str | None

    def summary(self) -> str:
        if not self.failed:
            return f"otlp: {self.pushes} push(es) to {self.endpoint}, all delivered"
        why = f" (last: {self.last_error})" if self.last_error else ""
        return (
            f"otlp: {self.failed} of {self.pushes} push(es) to {self.endpoint} failed{why}; "
            f"{self.points_dropped:,} data points dropped"
        )


class OtlpPush:
    """Push ``source``'s metrics to ``endpoint`` every ``interval_ns``, on the SDK's reader thread, until ``close()``.

    The first push is one interval after the start; ``close()`` makes a last
    one (after the session finished, it carries the run's final counts).
    """

    def __init__(self, source: TraceMetrics, endpoint: str, interval_ns: int = DEFAULT_INTERVAL_NS) -> None:
        self.endpoint = endpoint
        self.timeout_s = min(MAX_EXPORT_TIMEOUT_S, interval_ns / 1e9)
        # Whatever OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE says: the histogram is cumulative, so is the rest.
        kinds = (Counter, UpDownCounter, Histogram, ObservableCounter, ObservableUpDownCounter, ObservableGauge)
        temporality: dict[type, AggregationTemporality] = dict.fromkeys(kinds, AggregationTemporality.CUMULATIVE)
        self._session = _RecordingSession()
        otlp = OTLPMetricExporter(
            endpoint=endpoint,
            timeout=self.timeout_s,
            compression=Compression.Gzip,
            session=self._session,
            preferred_temporality=temporality,
        )
        self._snapshots = _PerCollection(source)
        self._exporter = _HistogramAndCounts(otlp, self._snapshots, temporality)
        self._quiet = _QuietSdk()
        self._quiet.install()
        reader = PeriodicExportingMetricReader(
            self._exporter, export_interval_millis=interval_ns / 1e6, export_timeout_millis=self.timeout_s * 1e3
        )
        resource = Resource.create(resource_attributes(source.node)).merge(OTELResourceDetector().detect())
        # Not at exit: close() makes the last push, bounded; an atexit one could wait 30 s for a lost collector.
        self._provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
        _instruments(self._provider, self._snapshots, self._exporter)

    def report(self) -> PushReport:
        pushes, failed, dropped = self._exporter.counts()
        return PushReport(self.endpoint, pushes, failed, dropped, self._session.last_error if failed else None)

    def close(self) -> PushReport:
        """Push once more and stop; waits at most the push deadline and a second."""
        try:
            self._provider.shutdown(timeout_millis=(self.timeout_s + 1.0) * 1e3)
        finally:
            self._quiet.uninstall()
        return self.report()


class _PerCollection:
    """One snapshot per collection: read by its first callback, shared by the rest and the histogram, then let go.

    The callbacks and the export of one collection run one after the other
    on the reader's thread; the lock covers a collection asked for elsewhere.
    """

    def __init__(self, source: TraceMetrics) -> None:
        self.source = source
        self.start_ns = time.time_ns()
        self._snap: MetricsSnapshot | None = None
        self._lock = threading.Lock()

    def current(self) -> MetricsSnapshot:
        with self._lock:
            if self._snap is None:
                self._snap = self.source.snapshot()
            return self._snap

    def end(self) -> MetricsSnapshot:
        """The collection's snapshot; the next call of ``current`` reads a new one."""
        with self._lock:
            snap, self._snap = self._snap, None
        return snap if snap is not None else self.source.snapshot()


class _HistogramAndCounts(MetricExporter):
    """Adds the exact call-duration histogram to each collection, hands it to ``inner``, counts failed pushes."""

    def __init__(
        self, inner: MetricExporter, snapshots: _PerCollection, temporality: dict[type, AggregationTemporality]
    ) -> None:
        super().__init__(preferred_temporality=temporality)
        self.inner = inner
        self.snapshots = snapshots
        self._lock = threading.Lock()
        self._pushes = self._failed = self._dropped = 0

    def counts(self) -> tuple[int, int, int]:
        """(pushes, failed pushes, data points of the failed ones)."""
        with self._lock:
            return self._pushes, self._failed, self._dropped

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        data = _add_metric(metrics_data, _histogram(self.snapshots.end(), self.snapshots.start_ns))
        result = self.inner.export(data, timeout_millis=timeout_millis)
        with self._lock:
            self._pushes += 1
            if result is not MetricExportResult.SUCCESS:
                self._failed += 1
                self._dropped += _points(data)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis)


Read = Callable[[MetricsSnapshot], Iterable[tuple[float, dict[str, str]]]]


def _instruments(provider: MeterProvider, snapshots: _PerCollection, exporter: _HistogramAndCounts) -> None:
    """The observable instruments, named and labelled as ``serve.metrics.TraceCollector`` names them."""
    meter = provider.get_meter(SCOPE, __version__)
    rate = EventRate()

    def observe(read: Read) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            snap = snapshots.current()
            return [Observation(value, {"node": snap.node, **labels}) for value, labels in read(snap)]

        return callback

    def counter(name: str, description: str, read: Read, unit: str = "") -> None:
        meter.create_observable_counter(name, [observe(read)], unit=unit, description=description)

    def gauge(name: str, description: str, read: Read) -> None:
        meter.create_observable_gauge(name, [observe(read)], description=description)

    counter(
        "gpuscope_calls",
        "CUDA, driver and NCCL calls traced",
        lambda s: [(c.count, {"source": c.source, "op": c.op}) for c in s.calls],
    )
    counter(
        "gpuscope_host_events",
        "host events of traced processes",
        lambda s: [(n, {"event": event}) for event, n in s.host_events],
    )
    counter("gpuscope_preemptions", "times a traced thread was preempted while runnable", lambda s: [(s.preempted, {})])
    counter(
        "gpuscope_events_dropped",
        "events lost in the kernel's ring, by what they were",
        lambda s: [(n, {"reason": reason}) for reason, n in s.dropped],
    )
    gauge(
        "gpuscope_findings",
        "live explain findings",
        lambda s: [(n, {"kind": kind, "severity": severity}) for kind, severity, n in s.findings],
    )
    counter("gpuscope_agent_cpu_seconds", "CPU time of the tracer itself", lambda s: [(s.agent_cpu_s, {})], unit="s")
    gauge(
        "gpuscope_agent_events_per_second",
        "events decoded since the last push, per second",
        lambda s: [(rate.update(s), {})],
    )
    counter(
        "gpuscope_otlp_exports_failed",
        "pushes to the collector that failed, after their retries",
        lambda s: [(exporter.counts()[1], {})],
    )
    counter("gpuscope_otlp_points_dropped", "data points of the failed pushes", lambda s: [(exporter.counts()[2], {})])
    gauge(
        "gpuscope_self_cost_ratio",
        "gpuscope's measured cost to a traced process: its probe time over its CPU time (recent seconds)",
        lambda s: [(share, {"pid": str(pid)}) for pid, share in sorted(s.sampling.self_costs, key=lambda c: -c[1])[:8]],
    )
    gauge(
        "gpuscope_self_cost_max_ratio",
        "gpuscope's measured cost to the process it costs most",
        lambda s: [(max(c for _, c in s.sampling.self_costs), {})] if s.sampling.self_costs else [],
    )
    gauge(
        "gpuscope_overhead_budget_ratio",
        "the share of a process's CPU time gpuscope may take",
        lambda s: [(s.sampling.budget, {})] if s.sampling.budget is not None else [],
    )
    gauge(
        "gpuscope_probe_coverage_ratio",
        "the share of the time the sampled ops were probed; their gpuscope_calls count only the calls seen then",
        lambda s: [(s.sampling.coverage, {})] if s.sampling.coverage is not None else [],
    )
    gauge(
        "gpuscope_calls_estimated",
        "an estimate of all the calls of an op probed in windows, from the calls seen and the time covered",
        lambda s: [(n, {"source": src, "op": op}) for src, op, n in s.sampling.estimated],
    )


def _histogram(snap: MetricsSnapshot, start_ns: int) -> Metric | None:
    """``gpuscope_call_duration_seconds`` from the snapshot's exact buckets; None before the first call."""
    now_ns = time.time_ns()
    points = []
    for c in snap.calls:
        edges = [0, *c.cumulative, c.count]
        points.append(
            HistogramDataPoint(
                attributes={"node": snap.node, "source": c.source, "op": c.op},
                start_time_unix_nano=start_ns,
                time_unix_nano=now_ns,
                count=c.count,
                sum=c.sum_s,
                bucket_counts=[b - a for a, b in itertools.pairwise(edges)],
                explicit_bounds=list(BUCKET_BOUNDS_S),
                min=c.min_s,
                max=c.max_s,
            )
        )
    if not points:
        return None
    data = HistogramData(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE)
    return Metric(name="gpuscope_call_duration_seconds", description="time inside each call", unit="s", data=data)


def _add_metric(data: MetricsData, metric: Metric | None) -> MetricsData:
    """``data`` with ``metric`` added to gpuscope's scope (the SDK's records are frozen: a new tree)."""
    if metric is None:
        return data
    resources = []
    for rm in data.resource_metrics:
        scopes = [
            ScopeMetrics(sm.scope, [*sm.metrics, metric], sm.schema_url) if sm.scope.name == SCOPE else sm
            for sm in rm.scope_metrics
        ]
        resources.append(ResourceMetrics(rm.resource, scopes, rm.schema_url))
    return MetricsData(resources)


def _points(data: MetricsData) -> int:
    return sum(len(m.data.data_points) for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics)


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")
_SSL = re.compile(r"\[SSL: ([A-Z_]+)\]")


class _RecordingSession(requests.Session):
    """The exporter's HTTP session, keeping the reason of the last push that failed, for trace's summary."""

    def __init__(self) -> None:
        super().__init__()
        self.last_error: str | None = None

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        try:
            response = super().request(*args, **kwargs)
        except requests.RequestException as exc:
            self.last_error = _reason(exc)
            raise
        if response.status_code >= 400:
            self.last_error = f"HTTP {response.status_code} {response.reason or ''}".strip()
        return response


def _reason(exc: requests.RequestException) -> str:
    """A few words for a failed request: the TLS or OS error under it, or a timeout."""
    text = str(exc)
    if isinstance(exc, requests.exceptions.SSLError) and (tls := _SSL.search(text)):
        return "TLS: " + tls.group(1).lower().replace("_", " ")
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if found := _ERRNO.search(text):
        return found.group(1).strip().lower()
    return type(exc).__name__


class _QuietSdk:
    """Keeps the SDK's log lines off the terminal while pushing.

    The SDK logs failed pushes through ``logging``; with no handler configured
    Python prints them on stderr, across the live view. The counts and the
    last reason go into trace's summary instead.
    """

    def __init__(self) -> None:
        self._logger = logging.getLogger("opentelemetry")
        self._handler = logging.NullHandler()
        self._propagate = self._logger.propagate

    def install(self) -> None:
        self._logger.addHandler(self._handler)
        self._logger.propagate = False

    def uninstall(self) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.propagate = self._propagate
