"""gpuscope export --format perfetto: aggregates as counter tracks, findings' causes linked to symptoms by flows."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from gpuscope.export.flows import (
    CAUSE_LINKS,
    MAX_LINKS_PER_FINDING,
    CauseLink,
    Span,
    flow_points,
    link_causes,
    symptom_pid,
)
from gpuscope.model.ops import Op
from gpuscope.query.finding_sources import FindingMarker
from tests.conftest import run_gpuscope
from tests.unit.analysis.builder import MS, US, Events, S, steady_training
from tests.unit.export.test_perfetto import assert_valid_trace_event_format

PAGE = 4096


def export(db: Path, out: Path, *args: str) -> dict[str, Any]:
    p = run_gpuscope("export", "--db", str(db), "-o", str(out), *args)
    assert p.returncode == 0, p.stderr
    trace: dict[str, Any] = json.loads(out.read_text())
    assert_valid_trace_event_format(trace)
    return trace


def counter_samples(trace: dict[str, Any], name: str) -> dict[str, list[tuple[float, float]]]:
    """{series: [(ts µs, value), ...] in time order} of one counter name."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "C" and e["name"] == name:
            for key, value in e["args"].items():
                series[key].append((e["ts"], value))
    return {k: sorted(v) for k, v in series.items()}


def page_allocs(ev: Events, pid: int, start: int, dur: int, count: int) -> None:
    ev.add(Op.mm_page_alloc, start, dur, pid, arg0=count, nbytes=count * PAGE)


def assert_flows_bind_to_their_slices(trace: dict[str, Any], cause: str, symptom: str) -> list[dict[str, Any]]:
    """Every flow start has one finish (same id, cat, name), later, and each end lies inside the slice meant.

    Perfetto binds a flow event to the innermost slice open on its thread at
    its ts and drops it when there is none: the innermost exported X slice
    strictly containing the point must be the cause (start) or the symptom (finish).
    """
    events = trace["traceEvents"]
    slices: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            slices[e["pid"], e["tid"]].append(e)

    def bound_to(flow: dict[str, Any]) -> str | None:
        around = [x for x in slices[flow["pid"], flow["tid"]] if x["ts"] < flow["ts"] < x["ts"] + x["dur"]]
        return min(around, key=lambda x: x["dur"])["name"] if around else None

    starts = [e for e in events if e["ph"] == "s"]
    finishes = [e for e in events if e["ph"] == "f"]
    assert Counter(e["id"] for e in starts) == Counter(e["id"] for e in finishes)
    assert all(n == 1 for n in Counter(e["id"] for e in starts).values())
    by_id = {e["id"]: e for e in finishes}
    for s in starts:
        f = by_id[s["id"]]
        assert (s["cat"], s["name"]) == (f["cat"], f["name"])
        assert s["ts"] < f["ts"], (s, f)  # Perfetto drops a flow whose finish it reads first
        assert f["bp"] == "e"
        assert bound_to(s) == cause, s
        assert bound_to(f) == symptom, f
    return starts


# -- aggregates ------------------------------------------------------------------


def test_page_allocations_are_counter_tracks_per_process_never_slices(tmp_path: Path) -> None:
    # given two processes' page-allocation aggregates, one interval spanning two 1 s buckets
    ev = Events(comms={100: "train", 200: "loader"})
    steady_training(ev, 100, pid=100)
    page_allocs(ev, 100, 0, S, 1000)
    page_allocs(ev, 100, S, S, 500)
    page_allocs(ev, 200, S // 2, S, 2000)
    # when
    trace = export(ev.to_db(tmp_path / "a.db"), tmp_path / "t.json")
    # then: no slice or instant for them, and not among the calls/s either
    events = trace["traceEvents"]
    assert not [e for e in events if e["name"] == "mm_page_alloc"]
    assert not [e for e in events if e["ph"] == "C" and "mm_page_alloc" in e["args"]]
    assert not [e for e in events if e["ph"] in {"X", "i"} and e["tid"] == 200]  # no empty thread track for it
    # counts per 1 s bucket as a rate, the straddling interval split by time, a 0 closing each series
    allocs = counter_samples(trace, "page allocations/s")
    assert allocs == {
        "train [100]": [(0.0, 1000.0), (1e6, 500.0), (2e6, 0.0)],
        "train [200]": [(0.0, 1000.0), (1e6, 1000.0), (2e6, 0.0)],
    }
    nbytes = counter_samples(trace, "page-allocation bytes/s")
    assert nbytes["train [200]"] == [(0.0, 1000.0 * PAGE), (1e6, 1000.0 * PAGE), (2e6, 0.0)]
    assert {e["pid"] for e in events if e["ph"] == "C"} == {1}  # the node's process track


def test_a_counter_series_drops_to_zero_over_a_gap_instead_of_holding_its_value(tmp_path: Path) -> None:
    ev = Events()
    page_allocs(ev, 100, 0, S, 10)
    page_allocs(ev, 100, 3 * S, S, 30)
    trace = export(ev.to_db(tmp_path / "a.db"), tmp_path / "t.json")
    (series,) = counter_samples(trace, "page allocations/s").values()
    assert series == [(0.0, 10.0), (1e6, 0.0), (3e6, 30.0), (4e6, 0.0)]
    # and calls/s keeps the same rule: the last sample of every series is 0
    for samples in counter_samples(trace, "calls/s").values():
        assert samples[-1][1] == 0.0


def test_counters_of_aggregates_use_the_counter_interval(tmp_path: Path) -> None:
    ev = Events()
    page_allocs(ev, 100, 0, S, 1000)
    trace = export(ev.to_db(tmp_path / "a.db"), tmp_path / "t.json", "--counter-interval", "500ms")
    (series,) = counter_samples(trace, "page allocations/s").values()
    assert series == [(0.0, 1000.0), (5e5, 1000.0), (1e6, 0.0)]


def test_a_counter_interval_that_would_cut_a_row_into_millions_of_samples_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    # given a 1 s aggregated row and a 1 ns interval (a billion samples: it once never finished)
    ev = Events()
    page_allocs(ev, 100, 0, S, 1000)
    db = ev.to_db(tmp_path / "a.db")
    # when
    p = run_gpuscope("export", "--db", str(db), "-o", str(tmp_path / "t.json"), "--counter-interval", "1ns", timeout=60)
    # then
    assert p.returncode == 2, p.stderr
    assert "more than 100,000 counter samples" in p.stderr and "use a --counter-interval of 10.0 µs or more" in p.stderr
    assert not (tmp_path / "t.json").exists()


# -- flows -----------------------------------------------------------------------


def _preempted_syncs(ev: Events, syncs: list[int], every: int = 4, extra: int = 5 * MS) -> None:
    """Every n-th sync `extra` longer, with a preemption of that length inside it (as test_rules_host does)."""
    for i, t in enumerate(syncs):
        if i % every == 0:
            ev.rows = [
                (r[0], r[1] + extra, *r[2:]) if r[0] == t and r[4] == int(Op.cudaStreamSynchronize) else r
                for r in ev.rows
            ]
            ev.sched(t + 20 * US, extra, preempted=True, by_pid=999)


def _preemption_db(path: Path) -> Path:
    ev = Events(comms={100: "train", 999: "stress"})
    _preempted_syncs(ev, steady_training(ev, 400))
    return ev.to_db(path)


def test_a_preemption_finding_links_its_off_cpu_slices_to_the_syncs_they_slowed(tmp_path: Path) -> None:
    # when: exported with the explain engine's findings
    trace = export(_preemption_db(tmp_path / "a.db"), tmp_path / "t.json", "--explain")
    # then
    markers = [e for e in trace["traceEvents"] if e.get("cat") == "finding" and e["ph"] == "i"]
    assert "cpu-preemption" in {m["args"]["kind"] for m in markers}
    starts = assert_flows_bind_to_their_slices(trace, "off-CPU (preempted)", "cudaStreamSynchronize")
    keys = Counter(s["name"] for s in starts)
    assert keys["cpu-preemption-100-cudaStreamSynchronize"] == MAX_LINKS_PER_FINDING
    assert trace["otherData"]["flows"] == len(starts)


def test_stored_findings_get_the_same_flows(tmp_path: Path) -> None:
    db = _preemption_db(tmp_path / "a.db")
    assert run_gpuscope("explain", "--db", str(db), "--save-findings").returncode == 0
    trace = export(db, tmp_path / "t.json")
    starts = assert_flows_bind_to_their_slices(trace, "off-CPU (preempted)", "cudaStreamSynchronize")
    assert "cpu-preemption-100-cudaStreamSynchronize" in {s["name"] for s in starts}


def test_max_events_keeps_only_flows_whose_both_slices_were_written(tmp_path: Path) -> None:
    trace = export(_preemption_db(tmp_path / "a.db"), tmp_path / "t.json", "--explain", "--max-events", "30")
    starts = assert_flows_bind_to_their_slices(trace, "off-CPU (preempted)", "cudaStreamSynchronize")
    assert 0 < len([s for s in starts if s["name"].startswith("cpu-preemption")]) < MAX_LINKS_PER_FINDING


def test_no_finding_no_flow(tmp_path: Path) -> None:
    ev = Events()
    steady_training(ev, 50)
    trace = export(ev.to_db(tmp_path / "a.db"), tmp_path / "t.json", "--explain")
    assert not [e for e in trace["traceEvents"] if e["ph"] in {"s", "f"}]


# -- the linker, on spans --------------------------------------------------------


def span(ts: int, dur: int, *, tid: int = 100, op: str = "cudaStreamSynchronize", arg0: int = 0) -> Span:
    return Span(1, ts, ts + dur, 100, tid, op, arg0, 0, 0)


def test_a_cause_on_another_thread_links_to_the_call_it_overlaps_most() -> None:
    calls = [span(0, 10 * MS), span(20 * MS, 10 * MS)]
    ios = [span(5 * MS, 2 * MS, tid=101, op="block_io"), span(18 * MS, 11 * MS, tid=101, op="block_io")]
    rows = sorted([*calls, *ios], key=lambda s: s.ts)
    pairs = link_causes(rows, 100, "cudaStreamSynchronize", CAUSE_LINKS["block-io"], 10)
    assert pairs == [(calls[1], ios[1]), (calls[0], ios[0])]  # worst first
    assert link_causes(rows, 100, "cudaStreamSynchronize", CAUSE_LINKS["block-io"], 1) == [(calls[1], ios[1])]


def test_a_same_thread_cause_must_nest_inside_the_call() -> None:
    link = CauseLink(("sched_switch",), True, lambda s: s.arg0 != 0)
    call = span(1 * MS, 10 * MS)
    nested = span(2 * MS, 3 * MS, op="sched_switch", arg0=1)
    straddling = span(9 * MS, 5 * MS, op="sched_switch", arg0=1)  # partial overlap: Perfetto keeps one of the two
    blocked = span(4 * MS, 1 * MS, op="sched_switch", arg0=0)
    assert link_causes([call, nested], 100, call.op, link, 10) == [(call, nested)]
    assert link_causes([call, straddling], 100, call.op, link, 10) == []
    assert link_causes([call, blocked], 100, call.op, link, 10) == []
    start, end = flow_points(call, nested) or (0, 0)
    assert nested.ts < start < nested.end < end < call.end


def test_the_symptom_pid_is_read_back_from_the_finding_id() -> None:
    def marker(key: str, kind: str, op: str | None) -> FindingMarker:
        return FindingMarker(key, "HIGH", "t", kind=kind, op=op)

    assert symptom_pid(marker("cpu-preemption-42-cudaMalloc", "cpu-preemption", "cudaMalloc")) == 42
    assert symptom_pid(marker("oom-42", "oom", None)) is None
    assert symptom_pid(marker("sync-stall-cudaMalloc", "sync-stall", "cudaMalloc")) is None


@pytest.mark.parametrize("kind", sorted(CAUSE_LINKS))
def test_every_linked_kind_is_a_rule_of_the_explain_engine(kind: str) -> None:
    from gpuscope.analysis.rules import RULES

    assert kind in {r.id for r in RULES}


def test_every_aggregated_op_has_counter_tracks_and_nothing_else_does() -> None:
    from gpuscope.export.perfetto import AGGREGATE_COUNTERS
    from gpuscope.model.ops import AGGREGATED_OPS

    assert set(AGGREGATE_COUNTERS) == {op.name for op in AGGREGATED_OPS}
