"""Findings: what `gpuscope explain` concludes, as frozen value objects.

A finding is symptom -> causes (each with evidence lines, an effect size and
culprits) -> fix, with a severity from the rubric in docs/explain.md.

``as_dict()`` is the wire shape (the TypedDicts of ``model.finding_wire``);
``Finding.from_dict`` reads one back, checked first: a finding from another
node is untrusted. The parts' ``from_wire`` take a dict that was checked.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import cast

from gpuscope.model.finding_wire import (
    CauseWire,
    CaveatWire,
    CulpritWire,
    EffectWire,
    FindingWire,
    HistogramWire,
    NodeFindingWire,
    Number,
    ReferenceFindingWire,
    SeriesWire,
    SeverityName,
    SpanWire,
    SymptomWire,
    check_finding_wire,
    effect_of,
    symptom_extra,
)
from gpuscope.model.units import fmt_ns


class Severity(enum.IntEnum):
    """Impact classes, ordered: a higher value is worse."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (one of {', '.join(s.name.lower() for s in cls)})") from None


RATIO_FLOOR_NS = 10_000
"""The smallest baseline a slowdown factor is taken against: "1400× slower" than a 1 µs call says nothing a
reader can use, so below 10 µs the factor is against 10 µs and the excess time is what is reported."""


@dataclass(frozen=True, slots=True)
class Effect:
    """How much a cause changes the symptom: affected calls against unaffected ones.

    ``p50_ratio`` = p50 of affected calls / p50 of unaffected calls (at least ``RATIO_FLOOR_NS``);
    ``slowest_share`` = share of the slowest calls that the cause overlapped;
    ``excess_share`` = share of the excess time (time above the op's p50)
    that the cause accounts for.
    """

    affected_calls: int
    unaffected_calls: int
    affected_p50_ns: int
    unaffected_p50_ns: int
    p50_ratio: float
    slowest_n: int
    slowest_overlapped: int
    excess_share: float
    explained_ns: int

    @property
    def floored(self) -> bool:
        """The unaffected p50 was under ``RATIO_FLOOR_NS``: ``p50_ratio`` is against the floor."""
        return self.unaffected_p50_ns < RATIO_FLOOR_NS

    @property
    def excess_p50_ns(self) -> int:
        return max(self.affected_p50_ns - self.unaffected_p50_ns, 0)

    def slowdown(self) -> str:
        """The slowdown in words: a factor, or the excess time when the baseline is too small for one."""
        if self.floored:
            return f"+{fmt_ns(self.excess_p50_ns)} (p50) slower"
        return f"{self.p50_ratio:.1f}× slower"

    @property
    def slowest_share(self) -> float:
        return self.slowest_overlapped / self.slowest_n if self.slowest_n else 0.0

    def as_dict(self) -> EffectWire:
        return {
            "affected_calls": self.affected_calls,
            "unaffected_calls": self.unaffected_calls,
            "affected_p50_ns": self.affected_p50_ns,
            "unaffected_p50_ns": self.unaffected_p50_ns,
            "p50_ratio": round(self.p50_ratio, 2),
            "slowest_n": self.slowest_n,
            "slowest_overlapped": self.slowest_overlapped,
            "slowest_share": round(self.slowest_share, 3),
            "excess_share": round(self.excess_share, 3),
            "explained_ns": self.explained_ns,
        }

    @classmethod
    def from_wire(cls, d: EffectWire) -> Effect:
        """The effect of a checked wire dict; ``slowest_share`` is derived again, not read."""
        return cls(
            d["affected_calls"],
            d["unaffected_calls"],
            d["affected_p50_ns"],
            d["unaffected_p50_ns"],
            d["p50_ratio"],
            d["slowest_n"],
            d["slowest_overlapped"],
            d["excess_share"],
            d["explained_ns"],
        )


@dataclass(frozen=True, slots=True)
class Culprit:
    """A process, thread or cgroup involved in a cause."""

    role: str  # "preemptor", "victim", "peer", "allocator", ...
    pid: int | None = None
    tid: int | None = None
    comm: str | None = None
    cgroup_id: int | None = None
    share: float | None = None  # of the cause's time or count
    time_ns: int | None = None

    def as_dict(self) -> CulpritWire:
        d: CulpritWire = {"role": self.role}
        # Only the keys that are known, in this order: a culprit's wire form never holds null.
        if self.pid is not None:
            d["pid"] = self.pid
        if self.tid is not None:
            d["tid"] = self.tid
        if self.comm is not None:
            d["comm"] = self.comm
        if self.cgroup_id is not None:
            d["cgroup_id"] = self.cgroup_id
        if self.share is not None:
            d["share"] = round(self.share, 3)
        if self.time_ns is not None:
            d["time_ns"] = self.time_ns
        return d

    @classmethod
    def from_wire(cls, d: CulpritWire) -> Culprit:
        return cls(
            d["role"], d.get("pid"), d.get("tid"), d.get("comm"), d.get("cgroup_id"), d.get("share"), d.get("time_ns")
        )

    def label(self) -> str:
        who = f"{self.comm or '?'} (pid {self.pid}" if self.pid is not None else f"cgroup {self.cgroup_id} ("
        extra = f", cgroup {self.cgroup_id}" if self.pid is not None and self.cgroup_id else ""
        return who + extra + ")"


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """A symptom's calls by duration: counts per bin between ``edges_ns`` (log-spaced, one more edge than bins),
    the calls the cause overlapped apart from the others. What the effect size summarises, for a chart."""

    edges_ns: tuple[int, ...]
    affected: tuple[int, ...]
    unaffected: tuple[int, ...]

    def as_dict(self) -> HistogramWire:
        return {"edges_ns": list(self.edges_ns), "affected": list(self.affected), "unaffected": list(self.unaffected)}

    @classmethod
    def from_wire(cls, d: HistogramWire) -> LatencyHistogram:
        return cls(tuple(d["edges_ns"]), tuple(d["affected"]), tuple(d["unaffected"]))


@dataclass(frozen=True, slots=True)
class TimeSeries:
    """A cause's measure over time, one value per bin of ``bin_ns`` from ``start_ns`` (the window's clock): what
    its rule saw change where no per-call comparison measures it (a call rate that fell, the GPU's idle share).
    ``unit``: "/s" for a rate, "%" for a share of each bin's time."""

    label: str
    unit: str
    start_ns: int
    bin_ns: int
    values: tuple[float, ...]

    def as_dict(self) -> SeriesWire:
        return {
            "label": self.label,
            "unit": self.unit,
            "start_ns": self.start_ns,
            "bin_ns": self.bin_ns,
            "values": [round(v, 3) for v in self.values],
        }

    @classmethod
    def from_wire(cls, d: SeriesWire) -> TimeSeries:
        return cls(d["label"], d["unit"], d["start_ns"], d["bin_ns"], tuple(float(v) for v in d["values"]))


@dataclass(frozen=True, slots=True)
class Cause:
    kind: str
    evidence: tuple[str, ...]
    effect: Effect | None = None
    culprits: tuple[Culprit, ...] = ()
    metrics: dict[str, float | int] = field(default_factory=dict)
    histogram: LatencyHistogram | None = None
    series: TimeSeries | None = None

    def as_dict(self) -> CauseWire:
        # Every EffectWire value is a number: the effect and the metrics share one object on the wire.
        effect: dict[str, Number] = cast("dict[str, Number]", self.effect.as_dict()) if self.effect else {}
        effect.update(self.metrics)
        d: CauseWire = {
            "kind": self.kind,
            "evidence": list(self.evidence),
            "effect": effect,
            "culprits": [c.as_dict() for c in self.culprits],
        }
        if self.histogram is not None:
            d["histogram"] = self.histogram.as_dict()
        if self.series is not None:
            d["series"] = self.series.as_dict()
        return d

    @classmethod
    def from_wire(cls, d: CauseWire) -> Cause:
        """The cause of a checked wire dict: its ``effect`` splits back into the effect size and the metrics."""
        wire = effect_of(d["effect"])
        effect = Effect.from_wire(wire) if wire is not None else None
        # The rest are metrics; a key of the effect size is one only when a metric overwrote its value.
        own: dict[str, object] = dict(effect.as_dict()) if effect is not None else {}
        metrics = {k: v for k, v in d["effect"].items() if k not in own or own[k] != v}
        culprits = tuple(Culprit.from_wire(c) for c in d["culprits"])
        histogram = LatencyHistogram.from_wire(d["histogram"]) if "histogram" in d else None
        series = TimeSeries.from_wire(d["series"]) if "series" in d else None
        return cls(d["kind"], tuple(d["evidence"]), effect, culprits, metrics, histogram, series)


@dataclass(frozen=True, slots=True)
class Symptom:
    """What the user sees: an op (or "process") of a pid, and its latency profile."""

    summary: str
    op: str | None = None
    pid: int | None = None
    comm: str | None = None
    count: int = 0
    p50_ns: int = 0
    p99_ns: int = 0
    max_ns: int = 0
    total_ns: int = 0
    extra: dict[str, float | int | str] = field(default_factory=dict)

    def as_dict(self) -> SymptomWire:
        d: SymptomWire = {
            "summary": self.summary,
            "op": self.op,
            "pid": self.pid,
            "comm": self.comm,
            "count": self.count,
            "p50_ns": self.p50_ns,
            "p99_ns": self.p99_ns,
            "max_ns": self.max_ns,
            "total_ns": self.total_ns,
        }
        d.update(self.extra)  # type: ignore[typeddict-item]  # extra keys sit beside the fixed ones (SymptomWire)
        return d

    @classmethod
    def from_wire(cls, d: SymptomWire) -> Symptom:
        """The symptom of a checked wire dict: every key ``SymptomWire`` does not name is an extra."""
        return cls(
            d["summary"],
            d["op"],
            d["pid"],
            d["comm"],
            d["count"],
            d["p50_ns"],
            d["p99_ns"],
            d["max_ns"],
            d["total_ns"],
            symptom_extra(d),
        )


@dataclass(frozen=True, slots=True)
class Caveat:
    """Why some numbers are incomplete: events of one source were lost while they were measured.

    ``kind`` is "lower-bound": counts and totals of that source are at least
    what is shown. ``dropped``: events of ``source`` ("cuda", "driver",
    "nccl", "host"; "stack" for call stacks) the kernel could not hand over
    during the analysed window; ``unlocated``: more lost by a session that
    overlaps the window, at times the recording does not say; ``share``:
    ``dropped`` / (counted + ``dropped``) of that source in the window, when
    the counts are known. ``text`` is the sentence shown to people.
    """

    kind: str
    source: str
    dropped: int
    unlocated: int = 0
    share: float | None = None
    text: str = ""

    def as_dict(self) -> CaveatWire:
        return {
            "kind": self.kind,
            "source": self.source,
            "dropped": self.dropped,
            "unlocated": self.unlocated,
            "share": None if self.share is None else round(self.share, 4),
            "text": self.text,
        }

    @classmethod
    def from_wire(cls, d: CaveatWire) -> Caveat:
        return cls(d["kind"], d["source"], d["dropped"], d["unlocated"], d["share"], d["text"])


@dataclass(frozen=True, slots=True)
class Span:
    """When a finding happened: CLOCK_MONOTONIC ns, as the analysed window's bounds."""

    start_ns: int
    end_ns: int

    def as_dict(self) -> SpanWire:
        return {"start_ns": self.start_ns, "end_ns": self.end_ns}


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One ranked conclusion, built by keyword. ``lost_ns`` is the wall time the problem costs (for ranking).

    ``rule`` is the id of the rule that concluded it; ``kind`` names the
    problem (the same as ``rule`` for every built-in rule). ``caveats`` say
    which of its numbers are lower bounds (events of their source were lost).
    """

    rule: str
    kind: str
    severity: Severity
    symptom: Symptom
    causes: tuple[Cause, ...]
    fix: str
    lost_ns: int = 0
    wall_ns: int = 0
    caveats: tuple[Caveat, ...] = ()
    # The time it covers (the calls it is about), where known: a dashboard zooms to it.
    span: Span | None = None

    @property
    def id(self) -> str:
        who = f"-{self.symptom.pid}" if self.symptom.pid is not None else ""
        op = f"-{self.symptom.op}" if self.symptom.op else ""
        return f"{self.kind}{who}{op}"

    @property
    def lost_share(self) -> float:
        return self.lost_ns / self.wall_ns if self.wall_ns > 0 else 0.0

    def evidence_lines(self) -> tuple[str, ...]:
        """Every cause's evidence, in order: what a reader is shown as the finding's reasons."""
        return tuple(line for c in self.causes for line in c.evidence)

    def as_dict(self) -> FindingWire:
        d: FindingWire = {
            "id": self.id,
            "severity": cast("SeverityName", self.severity.name),  # SeverityName is Severity's names
            "kind": self.kind,
            "rule": self.rule,
            "symptom": self.symptom.as_dict(),
            "causes": [c.as_dict() for c in self.causes],
            "fix": self.fix,
            "impact": {"lost_ns": self.lost_ns, "wall_ns": self.wall_ns, "lost_share": round(self.lost_share, 4)},
            "caveats": [c.as_dict() for c in self.caveats],
        }
        if self.span is not None:
            d["span"] = self.span.as_dict()
        return d

    @classmethod
    def from_dict(cls, obj: object) -> Finding:
        """The finding a wire dict (``as_dict()``'s shape, e.g. from another node) describes, checked first.

        Its ``as_dict()`` is the dict it was read from: ``id``, ``lost_share`` and
        ``slowest_share`` are derived again, the other numbers are the sent (rounded)
        ones; keys the shape does not name are dropped.

        Raises ``finding_wire.MalformedFindingError`` (one line) when ``obj`` is not that shape.
        """
        d = check_finding_wire(obj)
        impact = d["impact"]
        return cls(
            rule=d["rule"],
            kind=d["kind"],
            severity=Severity[d["severity"]],
            symptom=Symptom.from_wire(d["symptom"]),
            causes=tuple(Cause.from_wire(c) for c in d["causes"]),
            fix=d["fix"],
            lost_ns=impact["lost_ns"],
            wall_ns=impact["wall_ns"],
            caveats=tuple(Caveat.from_wire(c) for c in d["caveats"]),
            span=Span(d["span"]["start_ns"], d["span"]["end_ns"]) if "span" in d else None,
        )


@dataclass(frozen=True, slots=True)
class NodeFinding:
    """A finding of one node of a fleet: the node's address (as ``--nodes`` names it) and the finding."""

    node: str
    finding: Finding

    def as_dict(self) -> NodeFindingWire:
        return {"node": self.node, **self.finding.as_dict()}

    @classmethod
    def from_dict(cls, node: str, obj: object) -> NodeFinding:
        """``node``'s finding from its wire dict; raises ``MalformedFindingError`` as ``Finding.from_dict`` does."""
        return cls(node, Finding.from_dict(obj))


@dataclass(frozen=True, slots=True)
class ReferenceFinding:
    """A finding the reference system stored in a file gpuscope imported: its words, kept apart from ours.

    ``agreement``: how gpuscope's own findings of the same window relate to it (one sentence).
    """

    id: str
    node: str
    wall_ns: int
    severity: str
    summary: str
    root_cause: str
    op: str
    agreement: str

    def as_dict(self) -> ReferenceFindingWire:
        return {
            "id": self.id,
            "node": self.node,
            "wall_ns": self.wall_ns,
            "severity": self.severity,
            "summary": self.summary,
            "root_cause": self.root_cause,
            "op": self.op,
            "agreement": self.agreement,
        }
