"""What `gpuscope explain` loads to start: nothing a given run does not use (start-up is part of its cost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.unit.query.builder import build_db

# Each costs tens of ms of imports, and a plain explain of a gpuscope recording into a pipe needs none:
# rich colours a terminal, the importer converts reference files, concurrent.futures loads logging.
_NOT_LOADED = ("rich", "gpuscope.importers.ingero", "concurrent.futures", "gpuscope.stacks.report")


def test_explain_into_a_pipe_loads_only_what_it_uses(tmp_path: Path) -> None:
    db = build_db(tmp_path / "r.db", n=20)
    probe = (
        "import json, sys\n"
        "from gpuscope.cli import main\n"
        f"rc = main(['explain', '--db', {str(db)!r}])\n"
        f"loaded = [m for m in {_NOT_LOADED!r} if m in sys.modules]\n"
        "print(json.dumps({'rc': rc, 'loaded': loaded}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == {"rc": 0, "loaded": []}
