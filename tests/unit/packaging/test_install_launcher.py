"""`make install`'s launcher: written for every user, refused over a foreign file, and checked as another user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.other_user import open_folder

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "install_launcher.py"
# Stands in for an environment's gpuscope: answers `version` and `completion bash`.
FAKE_GPUSCOPE = (
    '#!/bin/sh\ncase "$1" in version) echo "gpuscope 9.9";; completion) echo "complete -F _g gpuscope";; esac\n'
)

needs_other_user = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="running as another user needs root and setpriv"
)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user can enter (pytest's own are private to root), removed afterwards."""
    with open_folder("gpuscope-install-") as d:
        yield d


def _environment(folder: Path, mode: int) -> Path:
    """An environment's ``bin/gpuscope`` under ``folder``, entered with ``mode``."""
    (folder / "env" / "bin").mkdir(parents=True)
    gpuscope = folder / "env" / "bin" / "gpuscope"
    gpuscope.write_text(FAKE_GPUSCOPE)
    gpuscope.chmod(0o755)
    (folder / "env").chmod(0o755)
    (folder / "env" / "bin").chmod(0o755)
    folder.chmod(mode)
    return gpuscope


def _install(bindir: Path, gpuscope: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(SCRIPT), "--bindir", str(bindir), "--completions", str(bindir.parent / "comp")]
    return subprocess.run([*argv, "--gpuscope", str(gpuscope)], capture_output=True, text=True, timeout=120)


def test_the_launcher_runs_the_environments_gpuscope_and_its_completion_is_written(open_dir: Path) -> None:
    gpuscope = _environment(open_dir / "checkout", 0o755)
    p = _install(open_dir / "bin", gpuscope)
    assert p.returncode == 0, p.stderr
    launcher = open_dir / "bin" / "gpuscope"
    assert subprocess.run([str(launcher), "version"], capture_output=True, text=True).stdout == "gpuscope 9.9\n"
    assert (open_dir / "comp" / "gpuscope").read_text() == "complete -F _g gpuscope\n"
    assert "warning" not in p.stderr


def test_a_gpuscope_that_is_not_a_launcher_of_ours_is_left_alone(open_dir: Path) -> None:
    (open_dir / "bin").mkdir()
    theirs = open_dir / "bin" / "gpuscope"
    theirs.write_text("#!/bin/sh\necho someone else's\n")
    p = _install(open_dir / "bin", _environment(open_dir / "checkout", 0o755))
    assert p.returncode == 1 and "is not ours: left alone" in p.stderr
    assert theirs.read_text() == "#!/bin/sh\necho someone else's\n"


@needs_other_user
def test_an_environment_in_a_private_folder_is_named_with_the_fix(open_dir: Path) -> None:
    # given an environment under a folder only root may enter (a pyenv Python in /root)
    gpuscope = _environment(open_dir / "root-home", 0o700)
    # when it is installed
    p = _install(open_dir / "bin", gpuscope)
    # then the install says that only root can run it, which folder is why, and how to fix it
    assert p.returncode == 0, p.stderr
    assert f"warning: only root can run {open_dir / 'bin' / 'gpuscope'}" in p.stderr
    assert f"{open_dir / 'root-home'} is private to its owner" in p.stderr
    assert "make install PYTHON=/usr/bin/python3" in p.stderr


@needs_other_user
def test_an_environment_every_user_can_reach_gives_no_warning(open_dir: Path) -> None:
    p = _install(open_dir / "bin", _environment(open_dir / "checkout", 0o755))
    assert p.returncode == 0 and p.stderr == "", p.stderr
