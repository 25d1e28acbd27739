"""A real Prometheus server scrapes `gpuscope trace --prometheus` and sees the recording's exact counts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import grafana_dashboard as dash
from tests.conftest import StandinLibs, TraceRun
from tests.privileged.support import cudart_script
from tests.prometheus_server import free_port, prometheus_server, query

CALLS = 400


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A Prometheus server scraping 127.0.0.1:<exporter port> every second; yields (its URL, the exporter port)."""
    exporter = free_port()
    jobs = f"""  - job_name: gpuscope\n    static_configs: [{{targets: ["127.0.0.1:{exporter}"]}}]"""
    with prometheus_server(tmp_path, jobs) as url:
        yield url, exporter


def _query(url: str, promql: str) -> dict[str, float]:
    """op -> value of an instant vector (the last scrape)."""
    return {s["metric"].get("op", ""): float(s["value"][1]) for s in query(url, promql)}


def test_prometheus_scrapes_the_recordings_exact_counts(
    tmp_path: Path, standin: StandinLibs, prometheus: tuple[str, int]
) -> None:
    url, port = prometheus
    # idle while Prometheus scrapes the final counts
    script = cudart_script(tmp_path / "work.py", standin.cudart, CALLS, then="time.sleep(6)")
    db = tmp_path / "t.db"
    tracer = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "trace", "--no-tui", "--db", str(db), "--lib", str(standin.cudart),
         "--prometheus", f"127.0.0.1:{port}", "--", sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert tracer.stdout is not None
        assert tracer.stdout.readline().strip() == "calls done"
        deadline = time.monotonic() + 20
        while True:  # until a scrape after the last call is in
            calls = _query(url, 'gpuscope_calls_total{job="gpuscope"}')
            if calls.get("cudaMalloc") == CALLS or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        counts = _query(url, 'gpuscope_call_duration_seconds_count{job="gpuscope"}')
        bucket_inf = _query(url, 'gpuscope_call_duration_seconds_bucket{job="gpuscope", le="+Inf"}')
        agent_cpu = _query(url, "gpuscope_agent_cpu_seconds_total")
    finally:
        tracer.wait(timeout=60)
    assert tracer.returncode == 0, tracer.stderr
    recorded = {str(op): int(str(n)) for op, n in TraceRun(db, 0, "", "").query(
        "SELECT op, count(*) FROM events WHERE source = 'cuda' GROUP BY op")}  # fmt: skip
    assert recorded == {"cudaMalloc": CALLS, "cudaStreamSynchronize": CALLS}
    assert {op: int(v) for op, v in calls.items()} == recorded
    assert {op: int(v) for op, v in counts.items()} == recorded == {op: int(v) for op, v in bucket_inf.items()}
    assert agent_cpu[""] > 0


def _vector(url: str, promql: str) -> list[dict[str, Any]]:
    """The series of an instant query (a PromQL error fails the test with Prometheus's message)."""
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(promql)}", timeout=10) as r:
            doc = json.load(r)
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{promql}: {exc.read().decode()}") from None
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def test_every_series_the_grafana_dashboard_queries_is_scraped_from_a_real_trace_and_every_panel_shows_data(
    tmp_path: Path, standin: StandinLibs, prometheus: tuple[str, int]
) -> None:
    # given the series the dashboard's panels select, with their suffixes (_total, _bucket, _sum, _count)
    doc = dash.load()
    wanted = {s.metric for _, expr in dash.queries(doc) for s in dash.selectors(expr)}
    url, port = prometheus
    # and a workload that allocates device memory it never frees, for a few seconds (a live memory-leak
    # finding), then stays until the test is done with Prometheus
    script = cudart_script(
        tmp_path / "leak.py", standin.cudart, CALLS, nbytes=1 << 20, sleep_each_s=0.01, then="sys.stdin.readline()"
    )
    tracer = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "trace", "--no-tui", "--db", str(tmp_path / "t.db"),
         "--lib", str(standin.cudart), "--prometheus", f"127.0.0.1:{port}", "--", sys.executable, str(script)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert tracer.stdout is not None and tracer.stdin is not None
        assert tracer.stdout.readline().strip() == "calls done"
        # when Prometheus has scraped them all (the finding shows once explain has looked at the recording),
        # three times within the panels' rate window (its first scrape may come seconds after its start)
        window = "15s"
        deadline = time.monotonic() + 60
        while True:
            series = _vector(url, '{__name__=~"gpuscope_.+", job="gpuscope"}')
            scraped = {str(s["metric"]["__name__"]) for s in series}
            scrapes = _vector(url, f'count_over_time(up{{job="gpuscope"}}[{window}])')
            enough = bool(scrapes) and float(scrapes[0]["value"][1]) >= 3
            if (wanted <= scraped and enough) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        # and Prometheus runs each panel's query, every node, source and op selected
        shown = {f"{title}: {expr}": _vector(url, dash.concrete(expr, window)) for title, expr in dash.queries(doc)}
    finally:
        if tracer.stdin is not None:
            tracer.stdin.close()  # the workload ends, and with it the trace
        tracer.wait(timeout=60)
    assert tracer.returncode == 0, tracer.stderr
    # then the real exporter wrote every series the dashboard selects
    assert sorted(wanted - scraped) == []
    # and every panel has data: its PromQL is valid and finds series
    assert sorted(query for query, series in shown.items() if not series) == []
