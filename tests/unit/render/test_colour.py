"""Severities and statuses are coloured on a terminal only, and never with NO_COLOR set (https://no-color.org)."""

from __future__ import annotations

import io
import re

import pytest

from gpuscope.render.colour import SEVERITY_STYLES, is_terminal, write_styled
from tests.terminal import Terminal, plain_environment  # noqa: F401 (an autouse fixture)

REPORT = "2 finding(s): 1 CRITICAL, 1 LOW\n\n1. [CRITICAL] nccl-hang: stuck\n2. [LOW] cold-start: slow first call"
# An SGR sequence that sets a foreground colour: 30-37, 90-97, or 38;5;N / 38;2;R;G;B.
_COLOUR = re.compile(r"\x1b\[(?:[\d;]*;)?(?:3[0-7]|9[0-7]|38)(?:;[\d;]*)?m")


def _strip(text: str) -> str:
    return re.sub(r"\x1b\[[\d;]*m", "", text)


def test_severities_are_coloured_on_a_terminal_and_the_text_is_unchanged() -> None:
    out = Terminal()
    write_styled(REPORT, out, SEVERITY_STYLES)
    written = out.getvalue()
    assert _COLOUR.search(written)
    assert "\x1b[1;31m[CRITICAL]\x1b[0m" in written
    assert _strip(written) == REPORT + "\n"


def test_nothing_but_the_text_goes_to_a_pipe() -> None:
    out = io.StringIO()
    assert not is_terminal(out)
    write_styled(REPORT, out, SEVERITY_STYLES)
    assert out.getvalue() == REPORT + "\n"


def test_no_color_turns_colour_off_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    write_styled(REPORT, out, SEVERITY_STYLES)
    assert _COLOUR.search(out.getvalue()) is None
    assert _strip(out.getvalue()) == REPORT + "\n"


def test_an_empty_no_color_is_not_set(monkeypatch: pytest.MonkeyPatch) -> None:
    # no-color.org: "when present and not an empty string"
    monkeypatch.setenv("NO_COLOR", "")
    out = Terminal()
    write_styled(REPORT, out, SEVERITY_STYLES)
    assert _COLOUR.search(out.getvalue())


def test_a_long_line_is_not_wrapped_or_cut_on_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "20")
    line = "1. [LOW] " + "x" * 200
    out = Terminal()
    write_styled(line, out, SEVERITY_STYLES)
    assert _strip(out.getvalue()) == line + "\n"


def test_brackets_in_the_text_are_not_read_as_markup() -> None:
    text = "[bold]not markup[/bold] :smile: 1. [HIGH] x"
    out = Terminal()
    write_styled(text, out, SEVERITY_STYLES)
    assert _strip(out.getvalue()) == text + "\n"
