"""How much of the time the sampled ops may be probed: the overhead budget's controller, as pure arithmetic.

``duty_for`` turns each traced process's measured load into the share of
time the sampled ops' probes may be attached (the costliest process decides);
``schedule`` turns that share into a window and a period. The thread that
attaches and detaches the probes is ``gpuscope.agent.sampling.ProbeSampler``.
"""

from __future__ import annotations

from dataclasses import dataclass

PERIOD_S = 1.0
# A window shorter than this holds too few calls to estimate from; the period grows instead (up to MAX_PERIOD_S).
MIN_WINDOW_S = 0.005
MAX_PERIOD_S = 10.0
# The share of the budget the controller aims at: what the calibration cannot see (cache effects in the
# workload, attaching and detaching) takes some of the rest.
MARGIN = 0.7


@dataclass(frozen=True, slots=True)
class ProcessLoad:
    """One traced process over the recent past, per second of wall time."""

    pid: int
    cpu_ns_per_s: float  # its CPU time (every thread)
    always_ns_per_s: float  # probe time of its always-probed calls
    sampled_full_ns_per_s: float  # probe time its sampled calls would cost with their probes always attached


def duty_for(loads: list[ProcessLoad], budget: float, margin: float = MARGIN) -> float:
    """The share of time the sampled ops' probes may be attached, in [0, 1]: the costliest process decides."""
    duty = 1.0
    for load in loads:
        if load.sampled_full_ns_per_s <= 0:
            continue
        room = margin * budget * load.cpu_ns_per_s - load.always_ns_per_s
        duty = min(duty, max(room, 0.0) / load.sampled_full_ns_per_s)
    return max(0.0, min(duty, 1.0))


def schedule(duty: float, period_s: float = PERIOD_S) -> tuple[float, float]:
    """(window_s, period_s) for a duty cycle: windows of at least MIN_WINDOW_S, the period stretched to fit."""
    if duty >= 1.0:
        return period_s, period_s
    window = duty * period_s
    if window >= MIN_WINDOW_S:
        return window, period_s
    # Too small a window to learn from: a minimal one, less often (at worst MIN_WINDOW_S every MAX_PERIOD_S,
    # so the estimates keep some data even where the always-probed calls use up the budget alone).
    return MIN_WINDOW_S, min(MIN_WINDOW_S / max(duty, 1e-9), MAX_PERIOD_S)
