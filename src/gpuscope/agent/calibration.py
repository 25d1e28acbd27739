"""What one probe hit costs a traced thread on this machine, measured when a trace starts.

A uprobe's cost is the trap, the kernel's handling of the probed instruction
(emulated or single-stepped), and the BPF program; a uretprobe adds a second
trap at the return. None of it shows in the traced process's own clock
readings, so the agent measures it: it times calls into its calibration
library (gpuscope.bpf.calibration) without probes, with its entry program,
and with its entry and return programs attached to this process alone, doing
a record's work on every hit. The fastest of several rounds is kept: other
tasks on the CPU only ever add time.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.agent.tracer import Tracer
from gpuscope.bpf.calibration import CalibrationLibrary, Prologue

CALLS = 1000
ROUNDS = 5


@dataclass(frozen=True, slots=True)
class ProbeCosts:
    """Nanoseconds a probe hit adds to a call, by the probed function's first instruction."""

    entry_ns: dict[Prologue, float]
    # A return probe's trap at the function's return does not depend on its first instruction (measured on
    # the emulated one, whose entry is cheapest to take out).
    return_ns: float

    def call_ns(self, prologue: Prologue, *, with_return: bool) -> float:
        """What probing one call costs: its entry probe, and its return probe if it has one."""
        return self.entry_ns[prologue] + (self.return_ns if with_return else 0.0)

    def as_dict(self) -> dict[str, float]:
        out = {f"entry_{p.value}_ns": round(v, 1) for p, v in self.entry_ns.items()}
        out["return_ns"] = round(self.return_ns, 1)
        return out


def _fastest(lib: CalibrationLibrary, prologue: Prologue) -> float:
    """ns per call of the fastest of ROUNDS loops of CALLS calls."""
    return min(lib.loop_ns(prologue, CALLS) for _ in range(ROUNDS)) / CALLS


def calibrate(tracer: Tracer, *, with_return: bool) -> ProbeCosts:
    """Time the calibration library's calls bare and probed (entry, then entry and return) in this process.

    Raises the loader's errors (no library, attach refused); the caller reports the cost as not measured.
    """
    lib = CalibrationLibrary.load()
    offsets = [lib.offsets[p] for p in Prologue]
    bare = {p: _fastest(lib, p) for p in Prologue}
    links = tracer.attach_calibration(str(lib.path), offsets, retprobe=False)
    try:
        entry = {p: _fastest(lib, p) for p in Prologue}
        both = entry[Prologue.EMULATED]
        if with_return:
            links += tracer.attach_calibration(str(lib.path), [lib.offsets[Prologue.EMULATED]], retprobe=True)
            both = _fastest(lib, Prologue.EMULATED)
    finally:
        tracer.detach_calibration(links)
    return ProbeCosts({p: max(entry[p] - bare[p], 0.0) for p in Prologue}, max(both - entry[Prologue.EMULATED], 0.0))
