"""Run a command as another user (``nobody``), for tests of what such a user may and may not do."""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

NOBODY = 65534
SRC = Path(__file__).resolve().parent.parent / "src"


@functools.cache
def _nobody_run() -> tuple[list[str], str, dict[str, str]] | None:
    """(command prefix, interpreter, extra environment) that run gpuscope as nobody, or None where impossible.

    This interpreter first; where nobody cannot execute it (a Python installed under root's home), the system's
    Python of the same version, given this environment's packages on PYTHONPATH.
    """
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return None
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    same = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    path = os.pathsep.join([str(SRC), *site.getsitepackages()])
    for interpreter, extra in ((sys.executable, {}), (same, {"PYTHONPATH": path})):
        if not os.path.exists(interpreter):
            continue
        probe = subprocess.run(
            [*prefix, interpreter, "-c", "import gpuscope"],
            capture_output=True,
            timeout=60,
            env=dict(os.environ, **extra),
        )
        if probe.returncode == 0:
            return prefix, interpreter, extra
    return None


def as_nobody(argv: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the user nobody, with a home and cache of its own under ``home`` (skips where impossible).

    An ``argv`` that starts with this interpreter runs with the one nobody can execute.
    """
    found = _nobody_run()
    if found is None:
        pytest.skip("cannot run this interpreter as the user nobody here")
    prefix, interpreter, extra = found
    home.mkdir(exist_ok=True)
    os.chown(home, NOBODY, NOBODY)
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / "cache"), **extra)
    if argv and argv[0] == sys.executable:
        argv = [interpreter, *argv[1:]]
    return subprocess.run([*prefix, *argv], env=env, capture_output=True, text=True, timeout=120)


def _nobody_prefix() -> list[str] | None:
    """The prefix that runs THIS interpreter as nobody, or None where nobody cannot execute it."""
    found = _nobody_run()
    return found[0] if found is not None and found[1] == sys.executable else None


@contextmanager
def open_folder(prefix: str) -> Iterator[Path]:
    """A folder every user can enter (pytest's own are private to root), removed afterwards.

    Removed whatever a test made of the folders in it (read-only, private): they are opened up first.
    """
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for sub in (d, *d.rglob("*")):
            if sub.is_dir() and not sub.is_symlink():
                sub.chmod(0o755)
        shutil.rmtree(d)


needs_root_to_plant = pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another user needs root")


def shared_folder(parent: Path) -> Path:
    """A folder like /tmp: every user may create in it (mode 1777), each may remove only their own entries."""
    folder = parent / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def plant_link(link: Path, target: Path | str) -> Path:
    """Make ``link`` -> ``target`` a symlink owned by the user nobody, as that user would plant it (needs root)."""
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    return link
