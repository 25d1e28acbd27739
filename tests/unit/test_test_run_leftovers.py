"""The test run's own temporary directory (tests/conftest.py): what a run leaves there fails it, and it is removed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def _run_suite(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run a one-file suite under the project's conftest, with TMPDIR a folder of this test (made if missing)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(CONFTEST, suite / "conftest.py")
    (suite / "test_one.py").write_text(body)
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp)}
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite), str(suite)],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return p, tmp


def test_a_run_that_leaves_a_temporary_folder_fails_names_it_and_still_removes_it(tmp_path: Path) -> None:
    # when a passing test leaves a folder in the temporary directory
    body = "import tempfile\n\ndef test_leaks():\n    tempfile.mkdtemp(prefix='left-by-a-test-')\n"
    p, tmp = _run_suite(tmp_path, body)
    # then the run fails and names it, and nothing of the run is left
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 passed" in p.stdout
    assert "left in the temporary directory" in p.stdout and "left-by-a-test-" in p.stdout
    assert sorted(x.name for x in tmp.iterdir()) == []


def test_a_run_that_uses_only_tmp_path_passes_and_removes_pytests_folders_too(tmp_path: Path) -> None:
    # when a test writes only in its tmp_path (made read-only, as permission tests do)
    body = "def test_clean(tmp_path):\n    (tmp_path / 'x').mkdir()\n    (tmp_path / 'x').chmod(0)\n"
    p, tmp = _run_suite(tmp_path, body)
    # then the run passes, and nothing is left in the temporary directory, pytest's folders included
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(x.name for x in tmp.iterdir()) == []


def test_a_run_removes_the_folder_of_a_killed_run_and_keeps_the_folder_of_a_running_one(tmp_path: Path) -> None:
    # given the folder of a run whose pytest is gone (killed: it could not remove it) and one of a live process
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    tmp = tmp_path / "tmp"
    stale = tmp / f"gpuscope-tests-{int(gone.stdout)}-abcd1234"
    running = tmp / f"gpuscope-tests-{os.getpid()}-efgh5678"
    for folder in (stale, running):
        (folder / "pytest-of-someone" / "locked").mkdir(parents=True)
        (folder / "pytest-of-someone" / "locked").chmod(0)
    # when the next run starts
    p, _ = _run_suite(tmp_path, "def test_nothing():\n    pass\n")
    # then the killed run's folder is gone, and the running one's is still there
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(x.name for x in tmp.iterdir()) == [running.name]
