"""Colour for severities and statuses in text written for people: on a terminal only, never with NO_COLOR.

The text itself is built plain (the renderers return ``str``, and tests read
it); colour is laid over it here, by pattern, when it is printed. Off a
terminal (a pipe, a file) the text is written exactly as built, so
``gpuscope explain | less`` and ``> report.txt`` hold no escape codes.
On a terminal rich writes the colours, and leaves them out when the
``NO_COLOR`` environment variable is set and not empty (https://no-color.org):
styles other than colour (bold) stay, as the convention allows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from gpuscope.model.findings import Severity
from gpuscope.model.printable import printable

if TYPE_CHECKING:
    from rich.text import Text

Styles = Sequence[tuple[str, str]]
"""(regular expression, rich style) pairs, applied in order: a later match restyles an earlier one."""

SEVERITY_STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.HIGH: "red",
    Severity.MEDIUM: "yellow",
    Severity.LOW: "cyan",
}

# "[HIGH] kind: ..." on a finding, and "2 HIGH, 1 LOW" in the count line above them.
SEVERITY_STYLES: Styles = tuple((rf"\[{s.name}\]|\b\d+ {s.name}\b", style) for s, style in SEVERITY_STYLE.items())


def is_terminal(out: TextIO) -> bool:
    """True when ``out`` is a terminal (a stream without ``isatty`` is not one)."""
    isatty = getattr(out, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


def styled(text: str, styles: Styles) -> Text:
    """``text`` with every match of each pattern in ``styles`` given its style (``^`` and ``$`` match at lines)."""
    from rich.text import Text  # only on a terminal: rich costs a command 40 ms of imports

    t = Text(text)
    for pattern, style in styles:
        t.highlight_regex(re.compile(pattern, re.MULTILINE), style)
    return t


def write_styled(text: str, out: TextIO, styles: Styles) -> None:
    """Write ``text`` and a newline to ``out``, coloured by ``styles`` when ``out`` is a terminal.

    The text quotes traced programs' names, files and functions: a control
    character in it is written as its escape (``\\x1b``), in a pipe as on a
    terminal (rich would pass ESC and U+202E through), before any colour is laid over.
    ``NO_COLOR`` is read here and handed to rich: rich 14+ reads it the same way
    itself, but rich 13 (which we allow) also took an empty value as set.
    """
    text = printable(text, keep_lines=True)
    if not is_terminal(out):
        out.write(text + "\n")
        return
    from rich.console import Console  # only on a terminal, as in ``styled``

    # force_terminal: our own isatty() decided, not FORCE_COLOR or a guess; soft_wrap: the text is laid
    # out already (aligned columns), rich must not wrap or crop it; markup and highlight off: brackets
    # and numbers in the report are text, not rich markup.
    console = Console(
        file=out,
        force_terminal=True,
        soft_wrap=True,
        markup=False,
        highlight=False,
        emoji=False,
        no_color=bool(os.environ.get("NO_COLOR")),
    )
    console.print(styled(text, styles))
