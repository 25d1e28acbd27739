"""The live demo: real processes on the stand-in CUDA library, traced by the real tracer.

All seven scenarios run shortened (--scale 0.6, long enough to stay clear of a busy machine) into one database, as
`gpuscope demo --live --scale 0.6` does: about 25 s on 2 CPUs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.demo import REGISTRY, DemoMode, DemoResult, DemoRunner, Scenario

SCALE = 0.6


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DemoResult]:
    work = tmp_path_factory.mktemp("demo-live")
    runner = DemoRunner(work / "demo.db", scale=SCALE, workdir=work / "bin")
    return {s.name: runner.run(s, DemoMode.LIVE) for s in REGISTRY}


@pytest.mark.parametrize("scenario", list(REGISTRY), ids=lambda s: s.name)
def test_explain_names_each_live_scenarios_cause_as_the_top_finding(
    scenario: Scenario, results: dict[str, DemoResult]
) -> None:
    r = results[scenario.name]
    kinds = [f.kind for f in r.report.findings]
    assert r.top_kind == scenario.expected_kind, kinds
    assert r.events > 0


def test_the_preemptors_the_demo_started_are_named_in_the_incident(results: dict[str, DemoResult]) -> None:
    top = results["incident"].report.findings[0]
    assert any(c.comm == "cpu_hog" for c in top.causes[0].culprits)


def test_each_live_scenario_is_its_own_complete_session(results: dict[str, DemoResult]) -> None:
    ids = [r.session_id for r in results.values()]
    assert ids == sorted(set(ids)) and len(ids) == len(REGISTRY)
    db = Path(next(iter(results.values())).db)
    assert db.exists()


HOST_BOUND = {"data-starvation", "launch-bound", "gil-bound", "sync-in-loop"}


@pytest.mark.parametrize("scenario", [s for s in REGISTRY if s.expected_kind not in HOST_BOUND], ids=lambda s: s.name)
def test_no_host_bound_rule_fires_on_a_scenario_that_is_not_host_bound(
    scenario: Scenario, results: dict[str, DemoResult]
) -> None:
    kinds = {f.kind for f in results[scenario.name].report.findings}
    assert not kinds & HOST_BOUND, kinds


def test_the_dataloader_scenario_names_the_python_code_from_its_samples(results: dict[str, DemoResult]) -> None:
    (f,) = [f for f in results["dataloader-starvation"].report.findings if f.kind == "data-starvation"]
    (host,) = [c for c in f.causes if c.kind == "host-time"]
    assert "`Dataset.__getitem__` (dataloader_loop.py:" in host.evidence[0]
    assert "__getitems__" in f.fix
