"""The dashboard's front-end libraries: pinned in web/package-lock.json, copied whole, served from the package."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from gpuscope.serve.app import vendored_files

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "src" / "gpuscope" / "serve" / "static"


def test_the_copies_are_the_locked_packages_files() -> None:
    # scripts/vendor_web.py --check: each file's sha256 is the manifest's, the manifest's version and integrity
    # the lock's
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "vendor_web.py"), "--check"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr


def test_each_library_ships_with_its_licence_at_an_exact_version() -> None:
    manifest = json.loads((STATIC / "vendor" / "MANIFEST.json").read_text())
    spec = json.loads((ROOT / "web" / "package.json").read_text())["dependencies"]
    for name, entry in manifest.items():
        assert "LICENSE" in entry["files"], name
        assert re.fullmatch(r"\d+\.\d+\.\d+", spec[name]) and spec[name] == entry["version"], (name, spec[name])


def test_the_page_loads_scripts_and_styles_from_its_own_origin_only() -> None:
    html = (STATIC / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert refs and all(r.startswith(("/static/", "/api/v1/")) for r in refs), refs
    # and every vendored file it names is one the server serves
    served = {f"/static/vendor/{pkg}/{name}" for pkg, names in vendored_files().items() for name in names}
    assert {r for r in refs if r.startswith("/static/vendor/")} <= served
