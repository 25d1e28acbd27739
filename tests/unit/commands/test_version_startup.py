"""`gpuscope --version` answers without loading any command."""

from __future__ import annotations

import json
import subprocess
import sys

from gpuscope._version import __version__


def test_the_version_is_printed_without_loading_a_command() -> None:
    probe = (
        "import json, sys\n"
        "from gpuscope.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('gpuscope.commands.') or m == 'numpy')\n"
        "print(json.dumps({'code': code, 'loaded': loaded}), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout == f"gpuscope {__version__}\n"
    assert json.loads(out.stderr.splitlines()[-1]) == {"code": 0, "loaded": []}


def test_help_still_names_every_command_with_its_summary() -> None:
    out = subprocess.run([sys.executable, "-m", "gpuscope", "--help", "--version"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "explain why GPU calls were slow" in out.stdout  # the explain command's HELP, loaded for --help
