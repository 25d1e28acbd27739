"""The findings' wire shape: as_dict() and from_dict() agree, a malformed finding is one clear error, the page's keys exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscope.analysis.engine import ExplainOptions, explain_db
from gpuscope.model.finding_wire import (
    CauseWire,
    CulpritWire,
    FindingWire,
    MalformedFindingError,
    NodeFindingWire,
    SeverityName,
    SymptomWire,
    check_finding_wire,
)
from gpuscope.model.findings import (
    Cause,
    Caveat,
    Culprit,
    Effect,
    Finding,
    LatencyHistogram,
    NodeFinding,
    Severity,
    Span,
    Symptom,
    TimeSeries,
)
from gpuscope.model.session_choice import EVERY_SESSION
from tests.demo_recording import every_scenario
from tests.unit.properties import quick

DASHBOARD_JS = Path(__file__).parents[3] / "src/gpuscope/serve/static/dashboard.js"


def _full_finding() -> Finding:
    """A finding with every part filled: effect size and metrics in one cause, culprits with and without
    optional fields, symptom extras, a caveat with and without a share."""
    effect = Effect(
        affected_calls=25,
        unaffected_calls=75,
        affected_p50_ns=5_050_000,
        unaffected_p50_ns=50_000,
        p50_ratio=101.0,
        slowest_n=10,
        slowest_overlapped=7,
        excess_share=0.123456,
        explained_ns=126_250_000,
    )
    return Finding(
        rule="cpu-preemption",
        kind="cpu-preemption",
        severity=Severity.HIGH,
        symptom=Symptom(
            "cudaStreamSynchronize of train (pid 100) is preempted",
            "cudaStreamSynchronize",
            100,
            "train",
            count=100,
            p50_ns=50_000,
            p99_ns=5_100_000,
            max_ns=5_200_000,
            total_ns=130_000_000,
            extra={"call_sites": "train.py:42", "rank": 2, "late_share": 0.25},
        ),
        causes=(
            Cause(
                "cpu-preemption",
                ("preempted 5.0 ms per call", "by cpu_hog (pid 999)"),
                effect,
                (Culprit("preemptor", 999, comm="cpu_hog", share=0.98765, time_ns=125_000_000), Culprit("victim")),
                metrics={"preempted_ns": 125_000_000, "cpu_share": 0.5},
                histogram=LatencyHistogram((10_000, 17_783, 31_623), (0, 25), (70, 5)),
            ),
            Cause(
                "host-work",
                ("stayed on the CPU",),
                metrics={"gap_p50_ns": 3},
                series=TimeSeries("GPU idle", "%", 5_000_000_000, 250_000_000, (12.5, 80.0, 100.0)),
            ),
            Cause("blocked", ()),
        ),
        fix="pin the process to its own cores",
        lost_ns=126_250_000,
        wall_ns=2_000_000_000,
        caveats=(
            Caveat("lower-bound", "host", 12, unlocated=3, share=0.012349, text="12 host events lost"),
            Caveat("lower-bound", "cuda", 1),
        ),
        span=Span(5_000_000_000, 7_000_000_000),
    )


@pytest.fixture(scope="module")
def demo_findings(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The wire dicts of real findings: every synthetic demo scenario recorded and explained."""
    db = every_scenario(tmp_path_factory.mktemp("wire") / "demo.db")
    wire: list[dict[str, Any]] = json.loads(
        json.dumps([f.as_dict() for f in explain_db(db, ExplainOptions(sessions=EVERY_SESSION)).findings])
    )
    return wire


def test_a_finding_read_back_from_its_json_gives_the_same_json() -> None:
    # given a finding with every part, through JSON as another node would send it
    f = _full_finding()
    text = json.dumps(f.as_dict())
    # when
    back = Finding.from_dict(json.loads(text))
    # then the JSON is byte-identical, and the typed parts are the sent ones (numbers as rounded on the wire)
    assert json.dumps(back.as_dict()) == text
    assert back.severity is Severity.HIGH and back.id == f.id and back.lost_ns == f.lost_ns
    assert back.symptom.extra == f.symptom.extra
    assert back.causes[0].effect == Effect(**{**_fields(f.causes[0].effect), "excess_share": 0.123})
    assert back.causes[0].metrics == f.causes[0].metrics and back.causes[1].effect is None
    assert back.causes[1].metrics == {"gap_p50_ns": 3} and back.causes[2] == f.causes[2]
    assert back.causes[0].culprits[1] == Culprit("victim") and back.causes[0].culprits[0].share == 0.988
    assert back.caveats[0].share == 0.0123 and back.caveats[1] == f.caveats[1]
    assert back.span == f.span and back.causes[0].histogram == f.causes[0].histogram
    assert back.causes[1].series == f.causes[1].series and back.causes[0].series is None


def test_a_finding_from_an_older_node_without_span_or_histogram_reads_back_without_them() -> None:
    # given a finding as a node of an earlier version sends it: no span, no histogram
    wire: dict[str, Any] = json.loads(json.dumps(_full_finding().as_dict()))
    del wire["span"]
    del wire["causes"][0]["histogram"]
    del wire["causes"][1]["series"]
    # when / then it is read, and says nothing of either
    back = Finding.from_dict(wire)
    assert back.span is None and back.causes[0].histogram is None and back.causes[1].series is None
    assert back.as_dict() == wire


def _fields(effect: Effect | None) -> dict[str, Any]:
    assert effect is not None
    return {name: getattr(effect, name) for name in Effect.__dataclass_fields__}


def test_every_demo_scenarios_finding_reads_back_to_the_same_json(demo_findings: list[dict[str, Any]]) -> None:
    assert len({f["kind"] for f in demo_findings}) >= 5
    for wire in demo_findings:
        assert Finding.from_dict(wire).as_dict() == wire


def test_a_node_finding_is_the_node_then_the_findings_own_keys() -> None:
    f = _full_finding()
    d = NodeFinding("gpu-1:8443", f).as_dict()
    assert list(d) == ["node", *f.as_dict()]
    assert NodeFinding.from_dict("gpu-1:8443", json.loads(json.dumps(f.as_dict()))).as_dict() == d


def test_keys_the_shape_does_not_name_are_dropped_not_refused() -> None:
    # given a newer node's finding with a key this version does not know
    wire: dict[str, Any] = json.loads(json.dumps(_full_finding().as_dict()))
    wire["confidence"] = "high"
    # when / then
    assert "confidence" not in Finding.from_dict(wire).as_dict()


DELETE = object()
MALFORMED: list[tuple[tuple[str | int, ...], object, str]] = [
    (("symptom",), DELETE, "finding: no 'symptom'"),
    (("severity",), "HUGE", "finding.severity: expected one of LOW, MEDIUM, HIGH, CRITICAL, got 'HUGE'"),
    (("severity",), 3, "finding.severity: expected one of LOW, MEDIUM, HIGH, CRITICAL, got 3"),
    (("symptom", "p50_ns"), "5 ms", "finding.symptom.p50_ns: expected an integer, got '5 ms'"),
    (("symptom", "pid"), True, "finding.symptom.pid: expected an integer or null, got True"),
    (("symptom", "count"), 1.5, "finding.symptom.count: expected an integer, got 1.5"),
    (("symptom", "rank"), [2], "finding.symptom.rank: expected a number or a string, got [2]"),
    (("symptom", "a\nb"), None, "finding.symptom.'a\\nb': expected a number or a string, got None"),
    (("causes",), {}, "finding.causes: expected a list, got {}"),
    (("causes", 1, "evidence", 0), 7, "finding.causes[1].evidence[0]: expected a string, got 7"),
    (("causes", 0, "effect", "cpu_share"), "x", "finding.causes[0].effect.cpu_share: expected a number, got 'x'"),
    (("causes", 0, "effect", "slowest_n"), 2.5, "finding.causes[0].effect.slowest_n: expected an integer, got 2.5"),
    (("causes", 0, "culprits", 1, "role"), DELETE, "finding.causes[0].culprits[1]: no 'role'"),
    (("causes", 0, "culprits", 0, "pid"), None, "finding.causes[0].culprits[0].pid: expected an integer, got None"),
    (("impact",), None, "finding.impact: expected an object, got None"),
    (("caveats", 0, "share"), "1%", "finding.caveats[0].share: expected a number or null, got '1%'"),
    (("span", "end_ns"), "later", "finding.span.end_ns: expected an integer, got 'later'"),
    (("span", "start_ns"), DELETE, "finding.span: no 'start_ns'"),
    (("causes", 0, "histogram", "affected"), {}, "finding.causes[0].histogram.affected: expected a list, got {}"),
    (("causes", 1, "series", "values", 0), "x", "finding.causes[1].series.values[0]: expected a number, got 'x'"),
    (
        ("causes", 0, "histogram", "edges_ns", 1),
        1.5,
        "finding.causes[0].histogram.edges_ns[1]: expected an integer, got 1.5",
    ),
    (("fix",), ["x" * 500], "finding.fix: expected a string, got " + repr(["x" * 500])[:39] + "…"),
]


def _changed(path: tuple[str | int, ...], value: object) -> Any:
    """The full finding's wire dict with the value at ``path`` replaced by ``value`` (or deleted)."""
    wire: Any = json.loads(json.dumps(_full_finding().as_dict()))
    parent = wire
    for step in path[:-1]:
        parent = parent[step]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return wire


@pytest.mark.parametrize(("path", "value", "message"), MALFORMED, ids=[m[2].split(":")[0] for m in MALFORMED])
def test_a_malformed_finding_is_one_line_naming_the_bad_key(
    path: tuple[str | int, ...], value: object, message: str
) -> None:
    with pytest.raises(MalformedFindingError) as got:
        Finding.from_dict(_changed(path, value))
    assert str(got.value) == f"malformed finding: {message}"
    assert "\n" not in str(got.value) and got.value.remedy


@pytest.mark.parametrize("obj", [None, [], "finding", 3, {}, {"severity": "HIGH"}])
def test_what_is_not_a_finding_object_at_all_is_refused_the_same_way(obj: object) -> None:
    with pytest.raises(MalformedFindingError, match=r"^malformed finding: finding"):
        Finding.from_dict(obj)


def _leaves(wire: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(wire, dict):
        return [path] + [p for k, v in wire.items() for p in _leaves(v, (*path, k))]
    if isinstance(wire, list):
        return [path] + [p for i, v in enumerate(wire) for p in _leaves(v, (*path, i))]
    return [path]


_PATHS = _leaves(_full_finding().as_dict())[1:]
_JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5), st.just([]), st.just({}))


@quick(300)
@given(path=st.sampled_from(_PATHS), junk=_JUNK, delete=st.booleans())
def test_any_one_changed_or_missing_value_reads_back_or_is_a_malformed_finding_never_a_crash(
    path: tuple[Any, ...], junk: object, delete: bool
) -> None:
    wire = _changed(path, DELETE if delete else junk)
    try:
        Finding.from_dict(wire)
    except MalformedFindingError as exc:
        assert "\n" not in str(exc)


def test_the_checked_wire_dict_is_the_object_given() -> None:
    wire = _full_finding().as_dict()
    assert check_finding_wire(wire) is wire


# The page (serve/static/dashboard.js) reads findings only through its FindingWire accessors: `f` is a finding,
# `c` one of its causes. Keys that no other answer of the API has are looked for in the rest of the file.
_ROOTS = {"f": FindingWire, "c": CauseWire}
_ONLY_FINDINGS = ("symptom", "causes", "evidence", "fix", "severity", "culprits", "caveats", "impact")


def _accessors() -> tuple[str, str]:
    """(the FindingWire accessor block of dashboard.js, the rest of the file)."""
    js = DASHBOARD_JS.read_text()
    m = re.search(r"^const FindingWire = Object\.freeze\(\{\n(.*?)^\}\);\n", js, re.S | re.M)
    assert m is not None, "dashboard.js: no `const FindingWire = Object.freeze({ ... });` block"
    return m.group(1), js[: m.start()] + js[m.end() :]


def _walk(shape: Any, keys: list[str]) -> bool:
    for key in keys:
        while get_origin(shape) is list:
            (shape,) = get_args(shape)
        if not is_typeddict(shape) or key not in get_type_hints(shape):
            return False
        shape = get_type_hints(shape)[key]
    return True


def test_every_finding_key_the_page_reads_is_in_the_wire_typeddicts() -> None:
    block, _ = _accessors()
    reads = re.findall(r"\b([fc])((?:\.\w+)+)", re.sub(r"//.*", "", block))
    assert len(reads) >= 8, block
    missing = [f"{root}{chain}" for root, chain in reads if not _walk(_ROOTS[root], chain.split(".")[1:])]
    assert missing == [], f"dashboard.js reads keys that model/finding_wire.py does not have: {missing}"


def test_the_page_reads_a_findings_own_keys_only_through_its_accessors() -> None:
    _, rest = _accessors()
    stray = re.findall(rf"\.({'|'.join(_ONLY_FINDINGS)})\b(?!\()", rest)  # FindingWire.fix(f) is a call, not a read
    assert stray == [], f"dashboard.js reads finding keys outside FindingWire: {stray}"


def test_the_wires_severities_are_the_severity_enums_names() -> None:
    assert get_args(SeverityName) == tuple(s.name for s in Severity)


def test_the_keys_the_tests_rely_on_are_the_shapes() -> None:
    # the checks above would pass vacuously if the shapes lost these keys
    assert {"symptom", "causes", "severity", "kind", "fix"} <= set(get_type_hints(FindingWire))
    assert {"summary", "op", "pid", "comm"} <= set(get_type_hints(SymptomWire))
    assert "evidence" in get_type_hints(CauseWire) and "role" in CulpritWire.__required_keys__
    assert NodeFindingWire.__required_keys__ == FindingWire.__required_keys__ | {"node"}
