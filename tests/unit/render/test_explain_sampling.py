"""explain's text marks the estimated counts, says how much was probed, and gives gpuscope's measured cost."""

from __future__ import annotations

from gpuscope.analysis.coverage import ProcessCost, SamplingSummary
from gpuscope.analysis.engine import Report
from gpuscope.analysis.frame import Window
from gpuscope.analysis.stats import OpStats
from gpuscope.render.explain import render_report

S = 1_000_000_000


def _report(costs: tuple[ProcessCost, ...] | None = None) -> Report:
    launches = OpStats("cudaLaunchKernel", None, 1_234_567, 2 * S, 1_000, 1_200, 1_500, 9_000, 0.2, 123_456.7,
                       estimated=True, coverage=0.021, seen=40_000)  # fmt: skip
    syncs = OpStats("cudaStreamSynchronize", None, 1_000, S, 20_000, 40_000, 60_000, 90_000, 0.1, 100.0)
    if costs is None:
        costs = (ProcessCost(4242, 70 * 10**6, 10 * S, 500_000, 0.01, 60 * 10**6, 9 * S),)
    return Report(
        Window(0, 10 * S, 0, 10 * S, 0, (1,), 10),
        (),
        (launches, syncs),
        (),
        stats_from="aggregates",
        sampling=SamplingSummary(0.01, ("cudaLaunchKernel",), 0.05, costs),
    )


def test_estimated_counts_are_marked_and_their_coverage_said() -> None:
    text = render_report(_report())
    assert "cudaLaunchKernel         ≈1,234,567" in text
    assert "cudaStreamSynchronize        1,000" in text
    assert "≈ estimated: cudaLaunchKernel probed 2.1% of the time (overhead budget)" in text


def test_the_measured_self_cost_is_given_against_the_budget() -> None:
    text = render_report(_report())
    assert (
        "gpuscope's own cost (measured): 0.70% of pid 4242's CPU time; 0.67% after its first seconds (budget 1.0%)"
        in text
    )


def test_a_process_traced_only_in_its_first_seconds_is_not_set_beside_the_budget_as_if_over_it() -> None:
    # given a process whose whole trace fell in the first seconds, probed whole on purpose
    text = render_report(_report((ProcessCost(4242, 540 * 10**6, 6 * S, 230_000, 0.01),)))
    # then its cost says it was never under the budget, instead of 9% standing beside "budget 1.0%"
    assert (
        "gpuscope's own cost (measured): 9.00% of pid 4242's CPU time, all in its first seconds, "
        "probed whole (`trace --keep-first`) (budget 1.0%)" in text
    )


def test_the_json_says_which_counts_are_estimates() -> None:
    d = _report().as_dict()
    op_stats, sampling = d["stats"], d["sampling"]
    assert isinstance(op_stats, list) and isinstance(sampling, dict), d
    stats = {s["op"]: s for s in op_stats}
    assert stats["cudaLaunchKernel"]["estimated"] is True and stats["cudaLaunchKernel"]["seen"] == 40_000
    assert "estimated" not in stats["cudaStreamSynchronize"]
    assert sampling["self_cost"][0]["budgeted_share"] == round(60 / 9000, 5)
