"""gpuscope's measured cost to each traced process, recorded as the trace runs (tables of
gpuscope.store.coverage): the probe windows of the sampled ops, the calibrated cost of a probe hit (or why it
could not be calibrated), and once a second each process's probe time (its calls times their cost, and the
on-CPU sampler's measured time for its samples) against its CPU time.
"""

from __future__ import annotations

import time

from gpuscope.agent.sampling import ProbeSampler, WindowStats
from gpuscope.agent.tracer import Tracer
from gpuscope.stacks.collector import StackCollector
from gpuscope.store.aggregates import BUCKET_NS
from gpuscope.store.coverage import insert_probe_costs, insert_probe_window, insert_self_costs
from gpuscope.store.sessions_write import set_session_flag
from gpuscope.store.writer import EventWriter


class SelfCostRecorder:
    """Writes what the overhead budget's sampler measured; ``sampler`` is set once the sampler exists (it
    calls ``on_window`` from its own thread)."""

    def __init__(self, session_id: int, writer: EventWriter, tracer: Tracer, stacks: StackCollector | None) -> None:
        self.session_id = session_id
        self.writer = writer
        self.tracer = tracer
        self.stacks = stacks
        self.sampler: ProbeSampler | None = None
        self._costs_saved = False
        self._samples_charged: dict[int, int] = {}
        self._last_coverage = (0, 0)

    def on_window(self, start_ns: int, end_ns: int, exact: bool, stats: list[WindowStats]) -> None:
        """A window of the sampled ops' probes closed and its calls were read: record it."""
        self.writer.write(insert_probe_window, self.session_id, start_ns, end_ns, exact, stats)

    def save(self) -> None:
        """Each traced process's probe and CPU time of the last second, and the calibration once known."""
        sampler = self.sampler
        if sampler is None:
            return
        if not self._costs_saved and sampler.calibration_error is not None:
            # Nothing to measure the self-cost with: the recording says why, instead of saying nothing.
            self._costs_saved = True
            self.writer.write(set_session_flag, self.session_id, "self_cost_error", sampler.calibration_error)
        if not self._costs_saved and sampler.costs is not None:
            self._costs_saved = True
            costs = sampler.costs
            rows = [(p.value, costs.entry_ns[p], costs.return_ns) for p in costs.entry_ns]
            self.writer.write(insert_probe_costs, self.session_id, rows)
        self._charge_cpu_samples()
        covered, elapsed = sampler.coverage()
        (c0, e0), self._last_coverage = self._last_coverage, (covered, elapsed)
        duty = (covered - c0) / (elapsed - e0) if sampler.budget is not None and elapsed > e0 else None
        interval = sampler.take_interval()
        if interval:
            bucket = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // BUCKET_NS * BUCKET_NS
            rows_ = [(c.pid, c.calls, c.probe_ns, c.cpu_ns) for c in interval]
            self.writer.write(insert_self_costs, self.session_id, bucket, sampler.budget, duty, rows_)

    def _charge_cpu_samples(self) -> None:
        """Each process's on-CPU samples since the last second, at the sampler's measured time per sample."""
        if self.stacks is None or self.sampler is None or not self.tracer.cpu_sample_hz:
            return
        c = self.tracer.counters()
        per_sample = c.get("cpu_sample_ns", 0) / max(c.get("cpu_samples", 0) + c.get("drop_cpu_sample", 0), 1)
        for pid, n in self.stacks.cpu_samples.items():
            new = n - self._samples_charged.get(pid, 0)
            if new > 0:
                self.sampler.add_cost(pid, new * per_sample)
                self._samples_charged[pid] = n
