"""Copy the dashboard's front-end libraries from the npm registry into the package, pinned and checked.

    python scripts/vendor_web.py           # fetch (npm pack), check against web/package-lock.json, copy
    python scripts/vendor_web.py --check   # offline: the copies match the manifest, the manifest the lock

``web/package.json`` names each library at one exact version and ``web/package-lock.json`` holds its
registry integrity (sha512 of the tarball). Fetching checks the tarball against it, then copies only the
files the page loads, and the licence, into ``src/gpuscope/serve/static/vendor/<name>/`` with a
``MANIFEST.json`` of their sha256. The copies are committed: the wheel ships them, and nothing is fetched
when the dashboard runs (its content security policy allows scripts from its own origin only).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "web" / "package-lock.json"
VENDOR = ROOT / "src" / "gpuscope" / "serve" / "static" / "vendor"
MANIFEST = VENDOR / "MANIFEST.json"
# What the page loads from each package, and its licence.
FILES = {"uplot": ("dist/uPlot.iife.min.js", "dist/uPlot.min.css", "LICENSE")}


def locked() -> dict[str, tuple[str, str]]:
    """(version, integrity) of each vendored package, from the lock file."""
    packages = json.loads(LOCK.read_text())["packages"]
    out = {}
    for name in FILES:
        entry = packages[f"node_modules/{name}"]
        out[name] = (str(entry["version"]), str(entry["integrity"]))
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch() -> None:
    manifest: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (version, integrity) in locked().items():
            out = subprocess.run(
                ["npm", "pack", f"{name}@{version}", "--pack-destination", tmp, "--silent"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()[-1]
            tarball = Path(tmp) / out
            algo, _, want = integrity.partition("-")
            got = base64.b64encode(hashlib.new(algo, tarball.read_bytes()).digest()).decode()
            if got != want:
                raise SystemExit(f"error: {name}@{version}: the tarball's {algo} is not the lock's integrity")
            files = {}
            with tarfile.open(tarball) as tar:
                for path in FILES[name]:
                    member = tar.extractfile(f"package/{path}")
                    if member is None:
                        raise SystemExit(f"error: {name}@{version} has no {path}")
                    data = member.read()
                    dest = VENDOR / name / Path(path).name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(data)
                    files[Path(path).name] = sha256(data)
            manifest[name] = {"version": version, "integrity": integrity, "files": files}
    MANIFEST.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"vendored {', '.join(manifest)} into {VENDOR.relative_to(ROOT)}", file=sys.stderr)


def problems() -> list[str]:
    """What differs between the copies, the manifest and the lock (empty: all agree)."""
    out = []
    manifest = json.loads(MANIFEST.read_text())
    for name, (version, integrity) in locked().items():
        entry = manifest.get(name)
        if entry is None or (entry["version"], entry["integrity"]) != (version, integrity):
            out.append(f"{name}: the manifest is not the locked {version}")
            continue
        for file, digest in entry["files"].items():
            path = VENDOR / name / file
            if not path.is_file() or sha256(path.read_bytes()) != digest:
                out.append(f"{name}: {file} is not the file of {name}@{version}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="check the copies offline instead of fetching them")
    args = ap.parse_args()
    if args.check:
        found = problems()
        for p in found:
            print(f"error: {p}", file=sys.stderr)
        return 1 if found else 0
    fetch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
