"""deploy/grafana/gpuscope.json: importable anywhere, and built on exactly the series the exporter produces.

The exporter's series come from the real collector (``serve.metrics``) over
live statistics with a call, a host event, a drop and a finding in them,
rendered by ``prometheus_client`` and read back with its own parser: the
names a Prometheus server would store, suffixes (``_total``, ``_bucket``,
``_sum``, ``_count``) and types included. A privileged test checks the same
against a real trace scraped by a real Prometheus
(tests/privileged/test_prometheus.py).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.agent.live_stats import LiveStats
from gpuscope.exporters.metrics import TraceCollector, TraceMetrics
from gpuscope.model.latency import LatencyHistogram
from gpuscope.model.ops import Op
from tests import grafana_dashboard as dash

NODE_MATCHER = 'node=~"$node"'
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return dash.load()


@pytest.fixture(scope="module")
def exported() -> dict[str, str]:
    """Every series name the exporter writes -> the type of its family (counter, gauge, histogram)."""
    calls, host = LatencyHistogram.empty(), LatencyHistogram.empty()
    calls.add(np.array([2_000, 30_000, 1_000_000], dtype=np.int64))
    host.add(np.array([5_000], dtype=np.int64))
    stats = LiveStats(per_op={int(Op.cudaMalloc): calls, int(Op.sched_switch): host}, events=4, preempted=1)
    registry = CollectorRegistry(auto_describe=False)
    source = TraceMetrics("gpu-1", lambda: stats, lambda: {"drop_cuda": 2}, lambda: {("memory-leak", "MEDIUM"): 1})
    registry.register(TraceCollector(source))
    text = generate_latest(registry).decode()
    return {s.name: f.type for f in text_string_to_metric_families(text) for s in f.samples}


def _all_selectors(doc: dict[str, Any]) -> list[tuple[str, dash.Selector]]:
    found = [(title, s) for title, expr in dash.queries(doc) for s in dash.selectors(expr)]
    found += [(f"${name}", s) for name, selector in dash.variable_selectors(doc) for s in dash.selectors(selector)]
    return found


def test_the_dashboard_asks_for_a_prometheus_data_source_and_a_node_when_imported(doc: dict[str, Any]) -> None:
    # given the dashboard's variables
    variables = {v["name"]: v for v in doc["templating"]["list"]}

    # then the data source is chosen at import (a variable, no uid of someone's Grafana) and nodes are listed
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["node"]["type"] == "query" and variables["node"]["multi"] and variables["node"]["includeAll"]
    assert dict(dash.variable_selectors(doc))["node"] == "gpuscope_agent_cpu_seconds_total"
    assert doc["id"] is None and doc["uid"] == "gpuscope"
    # and every panel, query and variable reads that data source
    for p in dash.panels(doc):
        if p["type"] == "row":
            continue
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        assert all(t["datasource"] == DATASOURCE for t in p["targets"]), p["title"]
    assert all(v["datasource"] == DATASOURCE for v in variables.values() if v["type"] == "query")


def test_panel_ids_are_unique_and_panels_do_not_overlap(doc: dict[str, Any]) -> None:
    panels = dash.panels(doc)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine


def test_the_dashboard_has_the_panels_an_operator_needs(doc: dict[str, Any]) -> None:
    # given what each panel queries
    exprs = [expr for _, expr in dash.queries(doc)]

    def any_query(pattern: str) -> bool:
        return any(re.search(pattern, e) for e in exprs)

    # then: call rate and latency per op, drops by reason, live findings, host events, the agent's cost
    assert any_query(r"sum by \(op\) \(rate\(gpuscope_calls_total")
    assert any_query(r"histogram_quantile\(0\.5, sum by \(op, le\)")
    assert any_query(r"histogram_quantile\(0\.99, sum by \(op, le\)")
    assert any_query(r"sum by \(reason\) \(rate\(gpuscope_events_dropped_total")
    assert any_query(r"gpuscope_findings")
    assert any_query(r"sum by \(event\) \(rate\(gpuscope_host_events_total")
    assert any_query(r"rate\(gpuscope_agent_cpu_seconds_total")
    assert any_query(r"gpuscope_agent_events_per_second")


def test_every_series_the_dashboard_selects_is_one_the_exporter_writes(
    doc: dict[str, Any], exported: dict[str, str]
) -> None:
    # given every metric selected by a panel or a variable
    selected = {s.metric for _, s in _all_selectors(doc)}

    # then the exporter writes each of them, under that exact name
    assert selected, "no query was read"
    assert sorted(selected - set(exported)) == []


def test_rates_are_taken_of_counters_only_and_gauges_are_never_differentiated(
    doc: dict[str, Any], exported: dict[str, str]
) -> None:
    # given each selected series and the function it is an argument of
    for title, s in _all_selectors(doc):
        kind = exported[s.metric]
        if s.function in dash.RATE_FUNCTIONS:
            # then a rate is of a counter, or of a histogram's buckets, sum or count (counters too)
            assert kind in ("counter", "histogram"), f"{title}: {s.function}() of the {kind} {s.metric}"
        elif kind != "gauge":
            # and a counter outside a rate only names series (a variable's values, count()), never a value
            assert s.function == "count" or title.startswith("$"), f"{title}: the {kind} {s.metric} as a value"


def test_every_quantile_is_taken_over_the_buckets_grouped_by_le(doc: dict[str, Any]) -> None:
    quantiles = [(t, e) for t, e in dash.queries(doc) if "histogram_quantile" in e]
    assert quantiles
    for title, expr in quantiles:
        assert [s.metric for s in dash.selectors(expr)] == ["gpuscope_call_duration_seconds_bucket"], title
        assert re.search(r"sum by \([^)]*\ble\b[^)]*\) \(rate\(", expr), title


def test_every_query_follows_the_node_variable_and_call_queries_the_source_and_op_variables(
    doc: dict[str, Any], exported: dict[str, str]
) -> None:
    for title, s in _all_selectors(doc):
        if title == "$node":
            continue  # the variable that lists the nodes
        assert NODE_MATCHER in s.matchers, f"{title}: {s.metric} ignores the node variable"
        if s.metric.startswith(("gpuscope_calls", "gpuscope_call_duration")) and not title.startswith("$"):
            assert 'source=~"$source"' in s.matchers and 'op=~"$op"' in s.matchers, title


def test_the_lexer_refuses_queries_it_cannot_read() -> None:
    # a query this reader does not understand fails the tests above instead of passing unread
    for unreadable in ("sum(rate(x[5m])", "frobnicate(x)", "sum by (op (x)", "x @@ y"):
        with pytest.raises(ValueError):
            dash.selectors(unreadable)
    # and what it reads, it reads whole: metrics on both sides of an operator, grouping lists skipped
    got = dash.selectors('sum by (op) (rate(a_total{node=~"$node"}[5m])) / on (op) group_left b')
    assert [(s.metric, s.function) for s in got] == [("a_total", "rate"), ("b", None)]
