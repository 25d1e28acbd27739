"""explain, check and diff colour their severities and statuses on a terminal, and only there."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from gpuscope.analysis.engine import ExplainOptions, Report
from gpuscope.analysis.frame import Window
from gpuscope.cli import main
from gpuscope.commands import explain as explain_command
from gpuscope.model.findings import Finding, Severity, Symptom
from tests.terminal import Terminal, plain_environment  # noqa: F401 (an autouse fixture)
from tests.unit.query.builder import build_db

_COLOUR = re.compile(r"\x1b\[(?:[\d;]*;)?(?:3[0-7]|9[0-7]|38)(?:;[\d;]*)?m")
_ANY_ESCAPE = "\x1b["


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch, out: io.StringIO) -> str:
    """What the command wrote to ``out`` as its stdout (the real one is back before anything is asserted)."""
    with monkeypatch.context() as m:
        m.setattr(sys, "stdout", out)
        main(argv)
    return out.getvalue()


def _report_with_findings(db: Path, options: ExplainOptions) -> Report:
    def finding(kind: str, severity: Severity) -> Finding:
        return Finding(rule=kind, kind=kind, severity=severity, symptom=Symptom(f"{kind} seen"), causes=(), fix="fix")

    window = Window(0, 10**9, 0, 10**9, 1_700_000_000_000_000_000, (1,), 10)
    return Report(window, (finding("nccl-hang", Severity.CRITICAL), finding("cold-start", Severity.LOW)), (), ())


@pytest.fixture
def explained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(explain_command, "explain_db", _report_with_findings)
    return build_db(tmp_path / "run.db", n=10)


def test_explain_colours_severities_on_a_terminal(explained: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _run(["explain", "--db", str(explained)], monkeypatch, Terminal())
    assert "\x1b[1;31m[CRITICAL]\x1b[0m" in text and _COLOUR.search(text)


def test_explain_in_a_pipe_has_no_escape_codes(explained: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _run(["explain", "--db", str(explained)], monkeypatch, io.StringIO())
    assert _ANY_ESCAPE not in text and "1. [CRITICAL] nccl-hang: nccl-hang seen" in text


def test_explain_with_no_color_has_no_colour(explained: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    text = _run(["explain", "--db", str(explained)], monkeypatch, Terminal())
    assert _COLOUR.search(text) is None and "[CRITICAL]" in text


def test_check_colours_its_marks_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    coloured = _run(["check"], monkeypatch, Terminal())
    plain = _run(["check"], monkeypatch, io.StringIO())
    assert _COLOUR.search(coloured) and _ANY_ESCAPE not in plain
    assert re.sub(r"\x1b\[[\d;]*m", "", coloured) == plain


def test_diff_colours_its_verdict_on_a_terminal_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = build_db(tmp_path / "a.db", n=200), build_db(tmp_path / "b.db", n=200)
    argv = ["diff", str(a), str(b), "--no-findings"]
    coloured = _run(argv, monkeypatch, Terminal())
    plain = _run(argv, monkeypatch, io.StringIO())
    assert "\x1b[32mno significant regressions\x1b[0m" in coloured and _ANY_ESCAPE not in plain
    assert re.sub(r"\x1b\[[\d;]*m", "", coloured) == plain
