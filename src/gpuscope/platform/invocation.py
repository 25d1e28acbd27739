"""How a person runs this very gpuscope from a shell, for the commands gpuscope prints for them to paste."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def invocation() -> str:
    """``gpuscope`` when PATH finds this installation, else the full path of its launcher.

    ``make demo`` runs gpuscope from the project's virtual environment,
    which is not on PATH until ``make install``: the next steps it prints must
    work when pasted either way. The entry point sits beside the interpreter
    (``<venv>/bin/gpuscope`` next to ``<venv>/bin/python``).
    """
    here = Path(sys.executable).with_name("gpuscope")
    found = shutil.which("gpuscope")
    if found is not None and _same_program(Path(found), here):
        return "gpuscope"
    if here.is_file():
        return str(here)
    return f"{sys.executable} -m gpuscope"


def _same_program(found: Path, here: Path) -> bool:
    """``found`` is ``here``, or a launcher that runs it (``make install`` writes one naming it)."""
    if found.resolve() == here.resolve():
        return True
    try:
        head = found.read_bytes()[:4096]
    except OSError:
        return False
    return str(here).encode() in head
