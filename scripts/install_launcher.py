"""`make install`: a `gpuscope` launcher for this checkout's environment, its bash completion, and a check.

The launcher is a two-line shell script that execs the environment's
``gpuscope``. Every user on PATH gets it, so the script then runs it as the
user ``nobody``: an environment built on a Python in a private folder (pyenv
under ``/root``, mode 0700) works for root and for no one else, and the user
learns that now, with the fix, not as "Permission denied" later.

    python scripts/install_launcher.py --bindir /usr/local/bin \
        --completions /usr/local/share/bash-completion/completions --gpuscope .venv/bin/gpuscope
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

MARK = "gpuscope launcher (make install)"
NOBODY = 65534


def write_launcher(bindir: Path, gpuscope: Path) -> Path:
    """Write ``bindir/gpuscope``; refuse to replace a file that is not a launcher of ours."""
    bindir.mkdir(parents=True, exist_ok=True)
    target = bindir / "gpuscope"
    if target.exists() and MARK not in target.read_text(errors="replace"):
        raise SystemExit(f"{target} exists and is not ours: left alone (remove it, or make install PREFIX=...)")
    tmp = bindir / "gpuscope.tmp"
    tmp.write_text(f'#!/bin/sh\n# {MARK}: runs {gpuscope}\nexec "{gpuscope}" "$@"\n')
    tmp.chmod(0o755)
    tmp.replace(target)
    return target


def write_completion(completions: Path, gpuscope: Path) -> Path:
    completions.mkdir(parents=True, exist_ok=True)
    out = completions / "gpuscope"
    script = subprocess.run([str(gpuscope), "completion", "bash"], capture_output=True, text=True, check=True)
    out.write_text(script.stdout)
    return out


def private_folder(path: Path) -> Path | None:
    """The first folder above ``path`` (links followed) that other users may not enter, if any."""
    for folder in reversed(path.resolve().parents):
        try:
            if not folder.stat().st_mode & stat.S_IXOTH:
                return folder
        except OSError:  # a folder root may not read either: nothing more to learn below it
            return None
    return None


def others_can_run(launcher: Path) -> str | None:
    """None when the user nobody can run ``launcher version``; else why not (one line). Checked only as root."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return None
    p = subprocess.run(
        [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(launcher), "version"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        cwd="/",
    )
    if p.returncode == 0:
        return None
    last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return last[:200]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bindir", type=Path, required=True)
    ap.add_argument("--completions", type=Path, required=True)
    ap.add_argument("--gpuscope", type=Path, required=True, help="the environment's gpuscope command")
    args = ap.parse_args(argv)
    gpuscope = args.gpuscope.absolute()  # not resolved: the launcher names the environment, not its interpreter
    launcher = write_launcher(args.bindir, gpuscope)
    completion = write_completion(args.completions, gpuscope)
    print(f"installed {launcher} (bash completion in {completion.parent}); zsh/fish: gpuscope completion -h")
    why = others_can_run(launcher)
    if why is not None:
        interpreter = (gpuscope.parent / "python3").resolve()
        private = private_folder(interpreter) or private_folder(gpuscope)
        where = f": {private} is private to its owner" if private else ""
        print(
            f"warning: only root can run {launcher}{where} ({why})\n"
            f"  the environment runs {interpreter}\n"
            "  fix: rebuild it on the system's Python: rm -rf .venv && make install PYTHON=/usr/bin/python3 "
            "(and keep the checkout in a folder every user can read); `sudo gpuscope` works as it is",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
