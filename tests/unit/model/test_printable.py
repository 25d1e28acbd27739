"""Traced text made safe to print: each control character shown as its escape, JSON values kept exact."""

from __future__ import annotations

import json

import pytest

from gpuscope.model.printable import json_printable, printable

HOSTILE = "\x1b[31mRED\x07\u202egnp.exe\x9b2J\u200b\ufeff\x00\r"


def test_every_control_character_becomes_the_escape_python_writes() -> None:
    assert printable(HOSTILE) == "\\x1b[31mRED\\x07\\u202egnp.exe\\x9b2J\\u200b\\ufeff\\x00\\x0d"


def test_tab_and_newline_are_escaped_in_a_cell_and_kept_in_lines() -> None:
    assert printable("a\tb\nc") == "a\\x09b\\x0ac"
    assert printable("a\tb\nc\x1b", keep_lines=True) == "a\tb\nc\\x1b"


@pytest.mark.parametrize("text", ["", "train.py", "kv.py:211 — émoji 🚀 日本語", "a\\x1b stays as typed"])
def test_text_without_control_characters_is_returned_unchanged(text: str) -> None:
    assert printable(text) is text


def test_json_keeps_every_value_and_writes_no_control_character_raw() -> None:
    doc = {"comm": HOSTILE, HOSTILE: [HOSTILE]}
    text = json_printable(json.dumps(doc, ensure_ascii=False))
    assert json.loads(text) == doc
    assert printable(text) == text  # nothing left to escape
    assert "🚀" in json_printable(json.dumps({"a": "🚀"}, ensure_ascii=False))  # other text stays as it is
