"""The findings' wire shape: the JSON ``Finding.as_dict()`` emits, written down once as TypedDicts, and its check.

``explain --json``, ``/api/v1/findings``, the MCP tools and ``explain --nodes``
all carry this shape, and the dashboard's page reads it (the ``FindingWire``
accessors at the top of ``serve/static/dashboard.js``, checked against these
TypedDicts by a test). Producers are type-checked against it by mypy
(``as_dict()`` returns these types); a reader of JSON from elsewhere (another
node, over the network) calls ``Finding.from_dict``, whose ``check_finding_wire``
walks these same TypedDicts, so the keys and their types are spelled here and
nowhere else.

Two places hold more than the TypedDicts say: a symptom's ``extra`` keys sit
beside its fixed ones (``SymptomWire``), and a cause's ``effect`` is its
``EffectWire`` (when it has an effect size) with its metrics merged in.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Literal, TypedDict, Union, cast, get_args, get_origin, get_type_hints, is_typeddict

from gpuscope.errors import GpuscopeError

Number = float | int
"""A metric or an effect figure: JSON has one number type, Python two; the wire keeps whichever was sent."""

SeverityName = Literal["LOW", "MEDIUM", "HIGH", "CRITICAL"]
"""The names of ``model.findings.Severity``, as the wire spells a severity (a test holds the two equal)."""


class EffectWire(TypedDict):
    """``Effect.as_dict()``: affected against unaffected calls; ``slowest_share`` is derived, not stored."""

    affected_calls: int
    unaffected_calls: int
    affected_p50_ns: int
    unaffected_p50_ns: int
    p50_ratio: Number
    slowest_n: int
    slowest_overlapped: int
    slowest_share: Number
    excess_share: Number
    explained_ns: int


class _CulpritRole(TypedDict):
    role: str


class CulpritWire(_CulpritRole, total=False):
    """``Culprit.as_dict()``: ``role`` always; the other keys only when known (never ``null``)."""

    pid: int
    tid: int
    comm: str
    cgroup_id: int
    share: Number
    time_ns: int


class HistogramWire(TypedDict):
    """``LatencyHistogram.as_dict()``: the symptom's calls by duration, in bins between ``edges_ns`` (log-spaced,
    one more edge than bins), split into the calls the cause overlapped and the others."""

    edges_ns: list[int]
    affected: list[int]
    unaffected: list[int]


class SeriesWire(TypedDict):
    """``TimeSeries.as_dict()``: a cause's measure over time, one value per ``bin_ns`` from ``start_ns`` (the
    window's clock), in ``unit`` ("/s": a rate; "%": a share of each bin's time)."""

    label: str
    unit: str
    start_ns: int
    bin_ns: int
    values: list[Number]


class _CauseKeys(TypedDict):
    kind: str
    evidence: list[str]
    effect: dict[str, Number]
    culprits: list[CulpritWire]


class CauseWire(_CauseKeys, total=False):
    """``Cause.as_dict()``. ``effect``: the ``EffectWire`` keys (when the cause has an effect size) and its metrics.

    ``histogram``: only on a cause with an effect size measured call by call (older nodes send none).
    ``series``: only on a cause whose rule measured something over time instead (a rate that fell, the GPU's
    idle share). (Optional keys are a ``total=False`` class: ``NotRequired`` is not seen in postponed annotations
    before Python 3.13.)
    """

    histogram: HistogramWire
    series: SeriesWire


class SymptomWire(TypedDict):
    """``Symptom.as_dict()``: these keys, then the symptom's ``extra`` ones (numbers or strings) beside them."""

    summary: str
    op: str | None
    pid: int | None
    comm: str | None
    count: int
    p50_ns: int
    p99_ns: int
    max_ns: int
    total_ns: int


class CaveatWire(TypedDict):
    kind: str
    source: str
    dropped: int
    unlocated: int
    share: Number | None
    text: str


class ImpactWire(TypedDict):
    lost_ns: int
    wall_ns: int
    lost_share: Number


class SpanWire(TypedDict):
    """``Span.as_dict()``: when a finding happened, in its node's CLOCK_MONOTONIC ns (as the window's
    ``start_ns``/``end_ns``; the window's ``start_wall_ns`` minus its ``start_ns`` turns them into wall time)."""

    start_ns: int
    end_ns: int


class _FindingKeys(TypedDict):
    id: str
    severity: SeverityName
    kind: str
    rule: str
    symptom: SymptomWire
    causes: list[CauseWire]
    fix: str
    impact: ImpactWire
    caveats: list[CaveatWire]


class FindingWire(_FindingKeys, total=False):
    """``Finding.as_dict()``. ``id`` is derived from the kind, the pid and the op.

    ``span``: the time the finding covers, where its rule knows it (older nodes send none).
    """

    span: SpanWire


class NodeFindingWire(FindingWire):
    """A finding of one node of a fleet (``explain --nodes --json``): ``node`` first, then ``FindingWire``'s keys."""

    node: str


class ReferenceFindingWire(TypedDict):
    """``ReferenceFinding.as_dict()``: a finding another tool stored in an imported file (``reference_findings``)."""

    id: str
    node: str
    wall_ns: int
    severity: str
    summary: str
    root_cause: str
    op: str
    agreement: str


class MalformedFindingError(GpuscopeError):
    """A finding read from elsewhere (another node) is not the shape ``Finding.as_dict()`` emits."""

    remedy = "the node may run another gpuscope version: compare the versions `gpuscope nodes` lists"


_MAX_SHOWN = 40  # characters of an offending value quoted in the message: it is untrusted, and one line
_SYMPTOM_KEYS = SymptomWire.__required_keys__
_EXTRA = float | int | str  # the value of a symptom's extra key (Symptom.extra)


def effect_of(effect: dict[str, Number]) -> EffectWire | None:
    """The effect size in a cause's wire ``effect`` (every ``EffectWire`` key is there), or None: metrics only."""
    return cast(EffectWire, effect) if EffectWire.__required_keys__ <= effect.keys() else None


def symptom_extra(symptom: SymptomWire) -> dict[str, float | int | str]:
    """The extra keys of a checked wire symptom: every key ``SymptomWire`` does not name."""
    return {k: cast(_EXTRA, v) for k, v in symptom.items() if k not in _SYMPTOM_KEYS}


def check_finding_wire(obj: object) -> FindingWire:
    """``obj`` as a ``FindingWire``, checked key by key against the TypedDicts above.

    Keys the shape does not name are let through (a newer node may send more);
    a symptom's extra keys must hold numbers or strings, as ``Symptom.extra`` does.

    Raises MalformedFindingError, one line naming the first bad key's path.
    """
    problem = _problem(obj, FindingWire, "finding")
    if problem is None and isinstance(obj, dict):
        for key, value in obj["symptom"].items():
            if key not in _SYMPTOM_KEYS and problem is None:
                problem = _problem(value, _EXTRA, f"finding.symptom.{_key(key)}")
        for i, cause in enumerate(obj["causes"]):
            if problem is None and effect_of(cause["effect"]) is not None:
                problem = _problem(cause["effect"], EffectWire, f"finding.causes[{i}].effect")
    if problem is not None:
        raise MalformedFindingError(f"malformed finding: {problem}")
    return cast(FindingWire, obj)


@functools.cache
def _hints(shape: type) -> dict[str, Any]:
    return get_type_hints(shape)


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if is_typeddict(hint):
        return "an object"
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        words = dict.fromkeys(_describe(a) for a in get_args(hint))
        if "a number" in words:
            words.pop("an integer", None)  # an integer is a number too
        return " or ".join(words)
    if origin is Literal:
        return "one of " + ", ".join(map(str, get_args(hint)))
    if origin is list:
        return "a list"
    if origin is dict:
        return "an object"
    return {int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def _problem(value: object, hint: Any, where: str) -> str | None:
    """What is wrong with ``value`` as a ``hint`` (a TypedDict or a type of one's values), or None when nothing is."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        if any(_problem(value, a, where) is None for a in get_args(hint)):
            return None
        return _expected(value, hint, where)
    if is_typeddict(hint):
        if not isinstance(value, dict):
            return _expected(value, hint, where)
        required: frozenset[str] = hint.__required_keys__
        for key, sub in _hints(hint).items():
            if key in value:
                problem = _problem(value[key], sub, f"{where}.{key}")
                if problem is not None:
                    return problem
            elif key in required:
                return f"{where}: no {key!r}"
        return None
    if origin is Literal:
        return (
            None
            if any(type(value) is type(a) and value == a for a in get_args(hint))
            else _expected(value, hint, where)
        )
    if origin is list:
        if not isinstance(value, list):
            return _expected(value, hint, where)
        (item,) = get_args(hint)
        return next((p for i, v in enumerate(value) if (p := _problem(v, item, f"{where}[{i}]")) is not None), None)
    if origin is dict:
        if not isinstance(value, dict):
            return _expected(value, hint, where)
        _, item = get_args(hint)
        return next((p for k, v in value.items() if (p := _problem(v, item, f"{where}.{_key(k)}")) is not None), None)
    if hint is type(None):
        return None if value is None else _expected(value, hint, where)
    # bool is an int to Python, but JSON's true is no count, pid or share.
    if isinstance(value, bool) or not isinstance(value, hint):
        return _expected(value, hint, where)
    return None


def _expected(value: object, hint: Any, where: str) -> str:
    return f"{where}: expected {_describe(hint)}, got {_shown(value)}"


def _shown(value: object) -> str:
    """``value`` quoted for a one-line message: ``repr`` escapes newlines and control characters; cut short."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def _key(key: object) -> str:
    """A key of the sender's in a path: as it is when it is a plain name, else quoted (it is untrusted too)."""
    plain = isinstance(key, str) and key.replace("-", "_").isidentifier() and len(key) <= _MAX_SHOWN
    return str(key) if plain else _shown(key)
