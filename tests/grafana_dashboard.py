"""The Grafana dashboard of deploy/grafana, read for the tests: its queries, and the metrics each one selects.

The queries are PromQL with Grafana's variables in them. ``selectors`` reads
one query far enough to name every metric it selects, the label matchers
written for it, and the function it is an argument of (``rate``, ...): a
small lexer, not a PromQL parser, that refuses what it does not know (an
unknown function, a keyword out of place) so a query it cannot read fails
the test instead of passing it unread.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "gpuscope.json"

FUNCTIONS = {
    "abs", "avg", "avg_over_time", "bottomk", "ceil", "clamp_max", "clamp_min", "count", "count_over_time",
    "delta", "deriv", "floor", "histogram_quantile", "increase", "irate", "label_replace", "max",
    "max_over_time", "min", "min_over_time", "quantile", "rate", "round", "scalar", "sort", "sort_desc",
    "sum", "sum_over_time", "time", "topk", "vector",
}  # fmt: skip
# Rates of change: their argument must be a counter's series (a histogram's buckets, sum and count are counters).
RATE_FUNCTIONS = {"rate", "irate", "increase"}
# Aggregations, which may take their grouping before the parenthesis: sum by (op) (...).
AGGREGATIONS = {"avg", "bottomk", "count", "max", "min", "quantile", "sum", "topk"}
# Keywords followed by a parenthesised list of label names, not of expressions.
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
BINARY_KEYWORDS = {"and", "or", "unless", "bool", "offset"}

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<labels>\{[^}]*\})
    | (?P<range>\[[^\]]*\])
    | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<open>\()
    | (?P<close>\))
    | (?P<other>[-+*/%^,=!<>]+)
    """,
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Selector:
    """One metric a query selects: its name, its label matchers as written, and the innermost function around it."""

    metric: str
    matchers: str
    function: str | None


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    out = []
    for p in doc["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target."""
    return [(p["title"], t["expr"]) for p in panels(doc) for t in p.get("targets", [])]


def variable_selectors(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(variable name, series selector) of every ``label_values(SELECTOR, LABEL)`` query variable."""
    out = []
    for v in doc["templating"]["list"]:
        if v["type"] != "query":
            continue
        query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_]\w*)\)", query.strip())
        assert m, f"variable {v['name']}: not a label_values(SELECTOR, LABEL) query: {query}"
        out.append((v["name"], m.group(1)))
    return out


def selectors(expr: str) -> list[Selector]:
    """The metrics ``expr`` selects; raises ValueError on anything this reader does not know."""
    tokens: list[tuple[str | None, str]] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"unreadable at {expr[pos:]!r} in {expr!r}")
        if m.lastgroup != "space":
            tokens.append((m.lastgroup, m.group()))
        pos = m.end()
    out: list[Selector] = []
    stack: list[str | None] = []  # what each open parenthesis belongs to: a function, or None
    i = 0

    def label_list_end(at: int) -> int:
        """The index of the ')' that closes the label list opened at ``at``."""
        if at >= len(tokens) or tokens[at][0] != "open":
            raise ValueError(f"a label list expected after {tokens[at - 1][1]} in {expr!r}")
        for j in range(at + 1, len(tokens)):
            if tokens[j][0] == "close":
                return j
            if tokens[j][0] not in ("name", "other"):
                break
        raise ValueError(f"an unclosed label list in {expr!r}")

    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][0] if i + 1 < len(tokens) else None
        if kind == "open":
            stack.append(None)
        elif kind == "close":
            if not stack:
                raise ValueError(f"unbalanced ')' in {expr!r}")
            stack.pop()
        elif kind == "name" and text in LABEL_LISTS:
            # group_left and group_right may stand alone; the others always take a list
            if following == "open" or text not in ("group_left", "group_right"):
                i = label_list_end(i + 1)
        elif kind == "name" and text in AGGREGATIONS and following == "name" and tokens[i + 1][1] in LABEL_LISTS:
            i = label_list_end(i + 2) + 1
            if i >= len(tokens) or tokens[i][0] != "open":
                raise ValueError(f"{text} without its argument in {expr!r}")
            stack.append(text)
        elif kind == "name" and following == "open":
            if text not in FUNCTIONS:
                raise ValueError(f"unknown function {text}() in {expr!r}")
            stack.append(text)
            i += 1
        elif kind == "name" and text not in BINARY_KEYWORDS:
            matchers = tokens[i + 1][1] if following == "labels" else ""
            function = next((f for f in reversed(stack) if f is not None and f not in LABEL_LISTS), None)
            out.append(Selector(text, matchers, function))
        i += 1
    if stack:
        raise ValueError(f"unbalanced '(' in {expr!r}")
    return out


def concrete(expr: str, rate_window: str = "15s") -> str:
    """``expr`` as Prometheus itself can run it: every variable for all of its values, the rate window fixed."""
    expr = expr.replace("$__rate_interval", rate_window).replace("$__interval", rate_window)
    return re.sub(r"\$\{?(node|source|op)\}?", ".*", expr)
