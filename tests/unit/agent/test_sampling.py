"""The overhead budget's controller: the duty cycle from measured loads, and the window schedule."""

from __future__ import annotations

import pytest

from gpuscope.agent.duty_cycle import MAX_PERIOD_S, MIN_WINDOW_S, ProcessLoad, duty_for, schedule
from gpuscope.agent.options import TraceOptions
from gpuscope.bpf.calibration import Prologue, prologue_at
from gpuscope.platform.system import parse_process_cpu_ns


def test_the_duty_cycle_keeps_the_costliest_process_within_its_budget() -> None:
    # given a host-bound process (1 CPU-second a second) whose sampled calls would cost 22 % probed always,
    # and one nearly idle process whose few calls would cost it more than its whole CPU time
    busy = ProcessLoad(1, 1e9, always_ns_per_s=0.2e6, sampled_full_ns_per_s=0.22e9)
    idle = ProcessLoad(2, 1e6, always_ns_per_s=0.0, sampled_full_ns_per_s=2e6)
    # when the duty is set for a 1 % budget (all of it, no margin)
    # then the busy process may be probed (1 % - 0.02 %) / 22 % of the time, the idle one 0.5 %: the lower wins
    assert duty_for([busy], 0.01, margin=1.0) == pytest.approx((0.01e9 - 0.2e6) / 0.22e9)
    assert duty_for([busy, idle], 0.01, margin=1.0) == pytest.approx(0.005)
    # and a process whose always-probed calls use up its budget leaves no room at all
    assert duty_for([ProcessLoad(3, 1e9, 0.02e9, 0.1e9)], 0.01, margin=1.0) == 0.0
    # and nothing sampled to pay for costs nothing
    assert duty_for([ProcessLoad(4, 1e9, 0.0, 0.0)], 0.01) == 1.0


def test_short_duties_stretch_the_period_rather_than_shrink_the_window() -> None:
    assert schedule(1.0) == (1.0, 1.0)
    assert schedule(0.02) == pytest.approx((0.02, 1.0))
    window, period = schedule(MIN_WINDOW_S / 4)
    assert window == MIN_WINDOW_S and period == pytest.approx(4.0)
    assert schedule(0.0) == (MIN_WINDOW_S, MAX_PERIOD_S)


def test_a_push_of_a_register_is_emulated_and_anything_else_counted_as_single_stepped() -> None:
    assert prologue_at(b"\x55\x48") is Prologue.EMULATED  # push %rbp
    assert prologue_at(b"\x41\x57") is Prologue.EMULATED  # push %r15
    assert prologue_at(b"\x48\x8d") is Prologue.STEPPED  # lea rip-relative
    assert prologue_at(b"\xf3\x0f") is Prologue.STEPPED  # endbr64
    assert prologue_at(b"") is Prologue.STEPPED


def test_a_process_cpu_time_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    fields = " ".join(["S"] + ["0"] * 10 + ["250", "50"] + ["0"] * 30)
    text = f"4242 (py (worker) 1) {fields}"
    ticks = 300
    import os

    assert parse_process_cpu_ns(text) == ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


class _Tracer:
    """What the sampler reads of a tracer before its thread starts."""

    samples = True

    def __init__(self) -> None:
        self.attached: dict[int, object] = {}
        self.opts = TraceOptions(sampled_probes=True)


def test_each_batch_is_costed_per_process_and_counted_into_the_window_it_fell_in() -> None:
    import numpy as np

    from gpuscope.agent.calibration import ProbeCosts
    from gpuscope.agent.sampling import ProbeSampler
    from gpuscope.bpf.wire import EVENT_DTYPE, Flag
    from gpuscope.model.ops import Op

    # given a sampler whose probe hits cost 1 µs (emulated), 10 µs (single-stepped) and 0.5 µs at return,
    # with its first window open since t=0 and closed at t=1,000
    windows: list[tuple[int, int, bool, list[tuple[int, int, float, int]]]] = []
    s = ProbeSampler(_Tracer(), 0.01, 10.0, lambda *w: windows.append(w), open_since_ns=0)  # type: ignore[arg-type]
    s.costs = ProbeCosts({Prologue.EMULATED: 1_000.0, Prologue.STEPPED: 10_000.0}, 500.0)
    s._flag_costs = np.array([1_500.0, 1_000.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 10_500.0, 10_000.0])
    s._end_chunk(1_000)
    # when a batch brings, for pid 7, two launches (one single-stepped) inside the window and a sync after it,
    # and for pid 8 one launch inside it
    ev = np.zeros(4, dtype=EVENT_DTYPE)
    ev["pid"] = [7, 7, 7, 8]
    ev["tid"] = [70, 71, 70, 80]
    ev["op"] = [
        int(Op.cudaLaunchKernel),
        int(Op.cudaLaunchKernel),
        int(Op.cudaStreamSynchronize),
        int(Op.cudaLaunchKernel),
    ]
    ev["flags"] = [0, int(Flag.STEPPED), 0, 0]
    ev["ts_ns"] = [100, 200, 2_000, 300]
    s.observe(ev)
    s.flush()
    # then each process's probe time is its calls times their measured cost, sampled calls apart
    assert s._totals[7].sampled_ns == 1_500 + 10_500 and s._totals[7].always_ns == 1_500 and s._totals[7].calls == 3
    assert s._totals[8].sampled_ns == 1_500
    # and the window reports, per process, the sampled calls seen inside it and their probe time
    ((start, end, exact, stats),) = windows
    assert (start, end, exact) == (0, 1_000, True)
    assert [(pid, calls, probe) for pid, calls, probe, _ in stats] == [(7, 2, 12_000.0), (8, 1, 1_500.0)]
