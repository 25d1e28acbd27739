"""`gpuscope trace` and the live demo leave nothing behind: no temporary files, no reserve, no running hogs.

Each command runs with TMPDIR pointed at an empty folder of the test's own,
so what the test finds there is what that command left (other sessions use
/tmp at the same time).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import StandinLibs, run_gpuscope
from tests.privileged.support import background, gpuscope_cmd


def _private_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return {**os.environ, "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(tmp_path / "cache")}, tmp


def _pids_running(marker: str) -> set[int]:
    """Processes (not zombies) whose command line contains ``marker``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # ended while we looked
        if marker in cmdline and state != "Z":
            found.add(int(entry.name))
    return found


def _wait_for_hogs(tmp: Path, proc: subprocess.Popen[str], timeout_s: float = 60) -> set[int]:
    """The pids of the demo's CPU hogs, once its storm has begun (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the demo ended before its CPU storm"
        pids = _pids_running(f"{tmp}/gpuscope-demo-work-") & _pids_running("/cpu_hog")
        if pids:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"no CPU hog appeared within {timeout_s} s")


def _survivors(hogs: set[int], timeout_s: float) -> set[int]:
    """The hogs still running after ``timeout_s`` (empty when all ended in time); survivors are then killed."""
    deadline = time.monotonic() + timeout_s
    while (alive := hogs & _pids_running("/cpu_hog")) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)  # a failing test must not leave them spinning on CPU 0
    return alive


def test_a_trace_leaves_nothing_in_the_temporary_directory_nor_a_reserve_beside_its_recording(
    tmp_path: Path, standin: StandinLibs
) -> None:
    # given an empty temporary directory and a folder for the recording
    env, tmp = _private_env(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    # when a short command is traced
    p = run_gpuscope("trace", "--db", str(out / "r.db"), "--lib", str(standin.cudart), "--", "true", env=env)
    # then it ran, the temporary directory is still empty, and beside the recording lie only SQLite's files
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in tmp.iterdir()) == []
    assert {x.name for x in out.iterdir()} <= {"r.db", "r.db-wal", "r.db-shm"}


def test_a_live_demo_stopped_by_sigterm_kills_its_hogs_and_removes_its_work_folder(tmp_path: Path) -> None:
    # given a live demo in its CPU storm, with an empty temporary directory of its own
    env, tmp = _private_env(tmp_path)
    cmd = gpuscope_cmd("demo", "incident", "--live", "--db", str(tmp_path / "d.db"))
    with background(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        hogs = _wait_for_hogs(tmp, proc)
        # when it is sent SIGTERM
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    # then it stopped as interrupted, no hog runs on, and it left nothing in the temporary directory
    assert proc.returncode == 130, err
    assert _survivors(hogs, 5) == set()
    assert sorted(x.name for x in tmp.iterdir()) == []


def test_the_hogs_of_a_live_demo_killed_with_sigkill_end_by_themselves(tmp_path: Path) -> None:
    # given a live demo in its CPU storm
    env, tmp = _private_env(tmp_path)
    cmd = gpuscope_cmd("demo", "incident", "--live", "--db", str(tmp_path / "d.db"))
    with background(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        hogs = _wait_for_hogs(tmp, proc)
        # when it is killed outright (no cleanup can run)
        proc.kill()
        proc.wait(timeout=10)
    # then its hogs notice their parent is gone and end within a couple of seconds (they spin in 1 s slices)
    assert _survivors(hogs, 5) == set()
