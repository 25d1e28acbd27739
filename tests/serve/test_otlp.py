"""The OTLP push over a stand-in session: exact counts and buckets, the resource, and failed pushes counted.

A real OTLP/HTTP receiver on loopback decodes what the SDK sends with
opentelemetry-proto; no tracing is needed (the privileged tests push a
real trace).
"""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from gpuscope.agent.live_stats import LiveStats
from gpuscope.exporters.metrics import BUCKET_BOUNDS_S, TraceCollector, TraceMetrics
from gpuscope.exporters.otlp import OtlpPush, resource_attributes
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from tests.otlp_receiver import by_op, labels, metrics_by_name, otlp_receiver, points
from tests.otlp_receiver import resource_attributes as pushed_resource

SECOND_NS = 1_000_000_000


def _source() -> TraceMetrics:
    malloc, sync = LatencyHistogram.empty(), LatencyHistogram.empty()
    # 3 calls under 1.024 µs, 2 between 1.024 and 2.048 µs, 1 of a second
    malloc.add(np.array([100, 500, 1000, 1100, 2000, 1_000_000_000], dtype=np.int64))
    sync.add(np.array([5_000_000] * 4, dtype=np.int64))
    switches = LatencyHistogram.empty()
    switches.add(np.array([7_000, 8_000], dtype=np.int64))
    per_op = {int(Op.cudaMalloc): malloc, int(Op.cudaStreamSynchronize): sync, int(Op.sched_switch): switches}
    stats = LiveStats(per_op=per_op, events=12, preempted=1)
    return TraceMetrics("gpu-1", lambda: stats, lambda: {"drop_cuda": 7}, lambda: {("cpu-preemption", "HIGH"): 2})


def test_a_push_carries_the_prometheus_names_exact_counts_and_buckets() -> None:
    source = _source()
    with otlp_receiver() as receiver:
        report = OtlpPush(source, receiver.url + "/v1/metrics", 60 * SECOND_NS).close()  # the last push, at once
        request = receiver.last()
    assert report.pushes == 1 and report.failed == 0
    assert receiver.paths == ["/v1/metrics"] and receiver.content_types == ["application/x-protobuf"]
    metrics = metrics_by_name(request)
    assert set(metrics) == {
        "gpuscope_calls",
        "gpuscope_call_duration_seconds",
        "gpuscope_host_events",
        "gpuscope_preemptions",
        "gpuscope_events_dropped",
        "gpuscope_findings",
        "gpuscope_agent_cpu_seconds",
        "gpuscope_agent_events_per_second",
        "gpuscope_otlp_exports_failed",
        "gpuscope_otlp_points_dropped",
    }
    # the Prometheus exporter's families: the same names and kinds (the push adds its own two counters)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TraceCollector(source))
    kinds = {"counter": "sum", "gauge": "gauge", "histogram": "histogram"}
    scraped = {family.name: kinds[family.type] for family in registry.collect()}
    pushed = {name: m.WhichOneof("data") for name, m in metrics.items() if not name.startswith("gpuscope_otlp_")}
    assert pushed == scraped
    calls = by_op(metrics["gpuscope_calls"])
    assert {op: p.as_int for op, p in calls.items()} == {"cudaMalloc": 6, "cudaStreamSynchronize": 4}
    assert metrics["gpuscope_calls"].sum.is_monotonic
    assert labels(calls["cudaMalloc"]) == {"node": "gpu-1", "source": "cuda", "op": "cudaMalloc"}
    hist = by_op(metrics["gpuscope_call_duration_seconds"])["cudaMalloc"]
    assert list(hist.explicit_bounds) == list(BUCKET_BOUNDS_S)
    assert hist.count == 6 == sum(hist.bucket_counts)
    assert list(hist.bucket_counts[:2]) == [3, 2]
    assert hist.bucket_counts[BUCKET_BOUNDS_S.index(2.0**30 / 1e9)] == 1  # 1 s: at or under 2^30 ns
    assert hist.sum == pytest.approx(1.0000047) and hist.min == pytest.approx(1e-7) and hist.max == 1.0
    assert {labels(p)["event"]: p.as_int for p in points(metrics["gpuscope_host_events"])} == {"sched_switch": 2}
    assert [p.as_int for p in points(metrics["gpuscope_preemptions"])] == [1]
    assert {labels(p)["reason"]: p.as_int for p in points(metrics["gpuscope_events_dropped"])}["cuda"] == 7
    (finding,) = points(metrics["gpuscope_findings"])
    assert labels(finding) == {"node": "gpu-1", "kind": "cpu-preemption", "severity": "HIGH"} and finding.as_int == 2


def test_the_resource_names_the_node_pod_cluster_and_rank_and_otel_variables_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_NAME", "k8s-node-3")
    monkeypatch.setenv("POD_NAME", "gpuscope-x7k2p")
    monkeypatch.setenv("POD_NAMESPACE", "monitoring")
    monkeypatch.setenv("GPUSCOPE_CLUSTER", "train-a")
    monkeypatch.setenv("GPUSCOPE_RANK", "3")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,gpuscope.cluster=train-b")
    with otlp_receiver() as receiver:
        OtlpPush(_source(), receiver.url, 60 * SECOND_NS).close()
        attrs = pushed_resource(receiver.last())
    assert attrs["service.name"] == "gpuscope"
    assert attrs["host.name"] == "gpu-1"
    assert attrs["k8s.node.name"] == "k8s-node-3"
    assert attrs["k8s.pod.name"] == "gpuscope-x7k2p"
    assert attrs["k8s.namespace.name"] == "monitoring"
    assert attrs["gpuscope.rank"] == 3
    assert attrs["deployment.environment"] == "prod"
    assert attrs["gpuscope.cluster"] == "train-b"  # OTEL_RESOURCE_ATTRIBUTES over GPUSCOPE_CLUSTER


def test_the_rank_comes_from_the_launcher_when_not_given() -> None:
    attrs = resource_attributes("gpu-1", {"SLURM_PROCID": "5", "SLURM_JOB_ID": "77"})
    assert attrs["gpuscope.rank"] == 5 and "k8s.pod.name" not in attrs


def test_a_refused_push_is_counted_and_its_points_reported_as_dropped_in_the_next() -> None:
    with otlp_receiver(refuse=1) as receiver:
        push = OtlpPush(_source(), receiver.url, SECOND_NS)
        receiver.wait_for(1)  # the first push, one interval in, refused
        report = push.close()
        request = receiver.last()
    assert report.pushes >= 2 and report.failed == 1 and report.points_dropped > 0
    assert report.last_error == "HTTP 400 Bad Request"
    assert f"1 of {report.pushes} push(es)" in report.summary() and "HTTP 400" in report.summary()
    metrics = metrics_by_name(request)
    assert [p.as_int for p in points(metrics["gpuscope_otlp_exports_failed"])] == [1]
    assert [p.as_int for p in points(metrics["gpuscope_otlp_points_dropped"])] == [report.points_dropped]


def test_a_collector_that_is_away_costs_a_failed_push_with_its_reason() -> None:
    with otlp_receiver() as receiver:
        url = receiver.url
    # the receiver is stopped: its port is closed
    report = OtlpPush(_source(), url, SECOND_NS).close()
    assert report.pushes == 1 and report.failed == 1 and report.points_dropped > 0
    assert report.last_error == "connection refused"
