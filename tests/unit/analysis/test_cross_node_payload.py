"""A node's collectives answer is checked before the cross-node analysis reads it: a malformed one is named."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from gpuscope.analysis.cross_node import cross_node_stragglers, payload_problem

from .test_cross_node import _late_every, _node


def _sound() -> dict[str, Any]:
    # as it arrives: JSON from another node
    return dict(json.loads(json.dumps(_node("a", 0, _late_every(30, 2, 5 * 1_000_000), preemptor=999,
                                            activity=(3, 0, 0)).payload)))  # fmt: skip


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(d: dict[str, Any]) -> None:
        target: Any = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


MEMBER = ["communicators", 0, "members", 0]
SERIES = [*MEMBER, "series", 0]


def test_a_sound_answer_has_no_problem() -> None:
    assert payload_problem(_sound()) is None


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (_set(["communicators"], {"not": "a list"}), "communicators is not a list"),
        (_set(["processes", "999"], 7), "processes: a name that is not text"),
        (_set([*MEMBER, "pid"], "100"), "communicators[0].members[0]: not an object with an integer pid"),
        (_set([*MEMBER, "pid"], 1 << 70), "communicators[0].members[0]: not an object with an integer pid"),
        (_set([*MEMBER, "rank"], [0]), "communicators[0].members[0]: rank or comm of the wrong type"),
        (_set([*SERIES, "op"], None), "series[0]: not an object with an op name"),
        (_set([*SERIES, "rows", 0], [1, 2]), "series[0]: rows are not lists of 6 integers"),
        (_set([*SERIES, "rows", 3, 1], 1.5), "series[0]: rows are not lists of 6 integers"),
        (_set([*SERIES, "first_seq"], "0"), "series[0]: first_seq is not an integer"),
        (_set([*SERIES, "preemptors"], []), "series[0]: preemptors do not match the rows"),
        (_set([*SERIES, "preemptors", 1], [[999]]), "series[0]: preemptors are not [pid, ns] pairs"),
    ],
)
def test_each_malformed_field_is_named_in_one_line(mutate: Callable[[dict[str, Any]], None], problem: str) -> None:
    payload = copy.deepcopy(_sound())
    mutate(payload)
    found = payload_problem(payload)
    assert found is not None and problem in found and "\n" not in found, found


def test_not_an_object_at_all_is_a_problem() -> None:
    assert payload_problem(["a", "list"]) == "not a JSON object"


def test_the_analysis_reads_every_field_the_check_passes() -> None:
    # the fields the check passes are the ones the analysis reads: a checked answer analyses without error
    nodes = [_node(n, r, _late_every(30, 2, 5 * 1_000_000) if r == 2 else [0] * 30) for r, n in enumerate("abc")]
    for n in nodes:
        assert payload_problem(json.loads(json.dumps(n.payload))) is None
    assert cross_node_stragglers(nodes)[0]
