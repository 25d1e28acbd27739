"""Text chosen by traced programs, made safe to print: its control characters shown, never obeyed.

A traced process names itself, its threads, its files and its functions: a
name can hold a terminal escape (ESC ``[2J`` clears the screen, OSC 8 makes
a link), a BEL, or a bidirectional override (U+202E) that shows ``exe.png``
for ``gnp.exe``. Output for people writes each such character as the escape
Python would (``\\x1b``, ``\\u202e``): the terminal shows it, and it still says
what the name holds. JSON keeps every value exact: there the same characters
become JSON's own ``\\uXXXX`` escapes (``json_printable``).
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL, the line and paragraph separators, and the Unicode format characters that reorder
# or hide text (zero-width, bidirectional embeddings, overrides and isolates, the byte order mark).
_OTHER_CONTROLS = r"\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_CONTROL = re.compile(rf"[\x00-\x1f{_OTHER_CONTROLS}]")
_CONTROL_BUT_LINES = re.compile(rf"[\x00-\x08\x0b-\x1f{_OTHER_CONTROLS}]")  # tab (\x09) and newline (\x0a) kept


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every control character written as its escape (``\\x1b``); unchanged when it holds none.

    ``keep_lines``: tab and newline stay as they are (a report of many lines,
    a CSV field, which quotes them); otherwise they are escaped too (a table
    cell, which must stay on its row).
    """
    pattern = _CONTROL_BUT_LINES if keep_lines else _CONTROL
    return pattern.sub(_escape, text) if pattern.search(text) else text


# What json.dumps(ensure_ascii=False) leaves as it is: it escapes only C0 controls, quotes and backslashes.
_JSON_UNESCAPED = re.compile(f"[{_OTHER_CONTROLS}]")


def json_printable(json_text: str) -> str:
    """JSON text with the control characters ``json.dumps`` writes raw as ``\\uXXXX`` escapes: the same values.

    Such characters can only be inside strings, where JSON's escape of a
    character decodes to that character.
    """
    if not _JSON_UNESCAPED.search(json_text):
        return json_text
    return _JSON_UNESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)
