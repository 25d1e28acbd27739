"""graph-recapture: graphs rebuilt after replay started, not graphs captured up front."""

from __future__ import annotations

from gpuscope.analysis.rules.graph import GraphRecaptureRule
from gpuscope.model.findings import Severity
from gpuscope.model.ops import Op

from .builder import MS, US, Events


def _capture(ev: Events, t: int, driver: bool = False) -> int:
    """Begin, end capture, instantiate from t; returns the time after."""
    if driver:
        begin, end, inst = Op.cuStreamBeginCapture, Op.cuStreamEndCapture, Op.cuGraphInstantiate
    else:
        begin, end, inst = Op.cudaStreamBeginCapture, Op.cudaStreamEndCapture, Op.cudaGraphInstantiate
    ev.add(begin, t, 5 * US)
    ev.add(end, t + 300 * US, 20 * US)  # 300 µs of capturing
    ev.add(inst, t + 400 * US, 2 * MS)
    return t + 3 * MS


def test_graphs_captured_again_while_replaying_are_graph_recapture() -> None:
    # given one graph replayed, then rebuilt every 10 launches (a batch-size change each time)
    ev = Events(comms={100: "serve"})
    t = _capture(ev, 0)
    for i in range(100):
        ev.add(Op.cudaGraphLaunch, t, 10 * US)
        t += 1 * MS
        if i % 10 == 9:
            t = _capture(ev, t)
    # when
    found = GraphRecaptureRule().evaluate(ev.context())
    # then
    assert len(found) == 1
    f = found[0]
    assert f.kind == "graph-recapture" and f.symptom.pid == 100
    assert f.symptom.extra["recaptures"] == 10
    metrics = f.causes[0].metrics
    assert metrics["instantiations_after_replay"] == 10 and metrics["launches"] == 100
    assert 10 * 2_300 * US <= metrics["cost_ns"] <= 10 * 2_400 * US
    assert "a new graph every" in " ".join(f.causes[0].evidence)
    assert f.severity >= Severity.MEDIUM  # ~2.3 ms of every ~13 ms
    assert "cudaGraphExecUpdate" in f.fix


def test_graphs_captured_up_front_then_replayed_are_not_recapture() -> None:
    ev = Events()
    t = 0
    for _ in range(8):  # one graph per batch size, as serving engines do at start-up
        t = _capture(ev, t)
    for _ in range(200):
        ev.add(Op.cudaGraphLaunch, t, 10 * US)
        t += 1 * MS
    assert GraphRecaptureRule().evaluate(ev.context()) == []


def test_driver_captures_count_and_a_few_recaptures_are_tolerated() -> None:
    ev = Events()
    t = _capture(ev, 0)
    for i in range(30):
        ev.add(Op.cuGraphLaunch, t, 10 * US)
        t += 1 * MS
        if i in (10, 20):
            t = _capture(ev, t, driver=True)
    assert GraphRecaptureRule().evaluate(ev.context()) == []  # 2 recaptures: below the minimum
    t = _capture(ev, t, driver=True)
    ev.add(Op.cuGraphLaunch, t, 10 * US)
    assert [f.symptom.extra["recaptures"] for f in GraphRecaptureRule().evaluate(ev.context())] == [3]
