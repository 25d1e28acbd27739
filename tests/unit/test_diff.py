"""gpuscope diff: the op slowed down in the second run is the top regression; unchanged ops are not flagged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpuscope.bpf.wire import EVENT_DTYPE
from gpuscope.diff import Change, DiffOptions, average_ranks, diff_databases, mann_whitney_u
from gpuscope.model.findings import Finding, Severity, Symptom
from gpuscope.model.ops import Op
from gpuscope.store.connect import connect_writer
from gpuscope.store.sessions_write import SessionInfo, create_session
from gpuscope.store.writer import EventWriter
from tests.conftest import run_gpuscope

# The "workload": three ops with log-normal latencies around these medians.
WORKLOAD = {Op.cudaMalloc: 20_000, Op.cudaStreamSynchronize: 200_000, Op.cudaLaunchKernel: 5_000}


def record(path: Path, seed: int, slow: dict[Op, float] | None = None, calls: int = 3_000) -> Path:
    """One run of the workload over 10 s, each op's durations multiplied by ``slow[op]``."""
    rng = np.random.default_rng(seed)
    conn = connect_writer(path)
    sid = create_session(conn, SessionInfo(f"u-{seed}", "node-a", "h", "6.18", "0.1", "1.1", 10**18, 0, [], {}))
    w = EventWriter(conn, sid)
    for op, median in WORKLOAD.items():
        ev = np.zeros(calls, dtype=EVENT_DTYPE)
        ev["ts_ns"] = np.sort(rng.integers(0, 10_000_000_000, calls))
        ev["duration_ns"] = rng.lognormal(np.log(median), 0.4, calls) * (slow or {}).get(op, 1.0)
        ev["pid"], ev["tid"], ev["op"] = 1000 + seed, 1000 + seed, int(op)
        ev["comm"] = b"train.py"
        w.put(ev)
    w.close()
    conn.close()
    return path


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    return record(tmp_path / "run41.db", 41), record(tmp_path / "run42.db", 42, {Op.cudaStreamSynchronize: 3.0})


def test_the_op_slowed_three_times_is_the_top_regression_and_the_others_are_not_flagged(
    runs: tuple[Path, Path],
) -> None:
    report = diff_databases(*runs, with_findings=False)
    top = report.ops[0]
    assert top.op == "cudaStreamSynchronize" and top.change is Change.REGRESSION
    assert top.p50_ratio == pytest.approx(3.0, rel=0.1)
    assert top.p_value is not None and top.p_value < 1e-10
    assert [o.op for o in report.regressions] == ["cudaStreamSynchronize"]
    assert {o.op: o.change for o in report.ops[1:]} == {
        "cudaMalloc": Change.UNCHANGED,
        "cudaLaunchKernel": Change.UNCHANGED,
    }
    assert all(o.count_a == o.count_b == 3_000 for o in report.ops)
    assert report.ops[1].rate_a == pytest.approx(300, rel=0.01)


def test_a_speed_up_is_an_improvement_not_a_regression(tmp_path: Path) -> None:
    a = record(tmp_path / "a.db", 1)
    b = record(tmp_path / "b.db", 2, {Op.cudaMalloc: 0.5})
    report = diff_databases(a, b, with_findings=False)
    assert not report.regressions
    assert {o.op: o.change for o in report.ops}["cudaMalloc"] is Change.IMPROVEMENT


def test_the_same_run_compared_with_itself_flags_nothing(runs: tuple[Path, Path]) -> None:
    report = diff_databases(runs[0], runs[0], with_findings=False)
    assert {o.change for o in report.ops} == {Change.UNCHANGED}


def test_a_tiny_but_significant_shift_is_not_flagged_below_the_minimum_ratio(tmp_path: Path) -> None:
    a = record(tmp_path / "a.db", 1, calls=20_000)
    b = record(tmp_path / "b.db", 2, {Op.cudaMalloc: 1.04}, calls=20_000)
    report = diff_databases(a, b, DiffOptions(), with_findings=False)
    malloc = {o.op: o for o in report.ops}["cudaMalloc"]
    assert malloc.p_value is not None and malloc.p_value < report.alpha_per_op
    assert malloc.change is Change.UNCHANGED


def test_mann_whitney_matches_known_values() -> None:
    ranks, ties = average_ranks(np.array([3, 1, 3, 2]))
    assert ranks.tolist() == [3.5, 1.0, 3.5, 2.0] and ties == 6.0
    # Completely separated samples of 10: P(b > a) = 1, and the exact two-sided p is 1.08e-5
    p, prob = mann_whitney_u(np.arange(10), np.arange(10, 20))
    assert prob == 1.0
    assert 1e-5 < p < 3e-4
    p, prob = mann_whitney_u(np.arange(20), np.arange(20))
    assert prob == 0.5 and p > 0.9


def test_the_cli_prints_regressions_first_and_json_parses(runs: tuple[Path, Path]) -> None:
    table = run_gpuscope("diff", *map(str, runs), "--table", "--no-findings")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("op "))
    assert lines[header + 2].split()[:2] == ["cudaStreamSynchronize", "regression"]
    assert "worst: cudaStreamSynchronize" in table.stdout
    as_json = run_gpuscope("diff", *map(str, runs), "--json", "--no-findings")
    doc = json.loads(as_json.stdout)
    assert doc["ops"][0]["op"] == "cudaStreamSynchronize" and doc["ops"][0]["change"] == "regression"
    gate = run_gpuscope("diff", *map(str, runs), "--json", "--no-findings", "--fail-on-regression")
    assert gate.returncode == 1


def test_findings_of_the_explain_engine_are_compared_whatever_the_pids(runs: tuple[Path, Path]) -> None:
    report = diff_databases(*runs)
    assert report.findings is not None
    # same workload, different pids: the same problems match by kind and op
    assert report.findings.both and not report.findings.only_a and not report.findings.only_b


def test_findings_present_in_only_one_run_are_listed(runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    def finding(kind: str, op: str, pid: int) -> Finding:
        symptom = Symptom(f"{op} is slow", op=op, pid=pid)
        return Finding(rule=kind, kind=kind, severity=Severity.HIGH, symptom=symptom, causes=(), fix="fix")

    fake = {
        str(runs[0]): [finding("cpu-preemption", "cudaMalloc", 1)],
        str(runs[1]): [finding("cpu-preemption", "cudaMalloc", 2), finding("slow-sync", "cudaStreamSynchronize", 2)],
    }
    monkeypatch.setattr("gpuscope.diff.explain_findings", lambda path, since_ns=None, sessions=None: fake[str(path)])
    report = diff_databases(*runs)
    assert report.findings is not None
    assert report.findings.only_a == ()
    assert report.findings.only_b == ("slow-sync:cudaStreamSynchronize",)
    assert report.findings.both == ("cpu-preemption:cudaMalloc",)


@pytest.mark.parametrize("seed", range(6))
def test_the_u_test_agrees_with_scipys_asymptotic_one(seed: int) -> None:
    """The hand-written test is SciPy's asymptotic Mann-Whitney U (tie and continuity corrections) on the
    samples diff compares: latencies with ties, sides of different sizes."""
    from scipy import stats  # a test dependency (pyproject's test extra): the reference implementation

    rng = np.random.default_rng(seed)
    a = np.round(rng.lognormal(3.0, 0.4, 40 + 17 * seed))
    b = np.round(rng.lognormal(3.0 + 0.05 * seed, 0.4, 60 + 5 * seed))
    p, prob = mann_whitney_u(a, b)
    ref = stats.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic", use_continuity=True)
    assert p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)
    assert prob == pytest.approx(ref.statistic / (len(a) * len(b)), rel=1e-12)
