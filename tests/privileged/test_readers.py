"""Readers of real traces leave no trace: live, closed, killed, from read-only media, as another user.

And a trace refuses to append to a damaged recording before it runs the command.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuscope.store.connect import ReadMode, read_mode
from tests.conftest import run_gpuscope
from tests.other_user import as_nobody, open_folder
from tests.privileged.support import LineReader, background, gpuscope_cmd
from tests.unit.store.test_connect_integrity import leftmost_child, recording, root_page, smash

HEADER_END = "Hit Ctrl-C to end."


# -- helpers -------------------------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user can reach (pytest's own are private to root), removed afterwards."""
    with open_folder("gpuscope-readers-") as d:
        yield d


def count_query(db: Path) -> list[str]:
    return gpuscope_cmd("query", "--db", str(db), "--csv", "SELECT count(*) AS n FROM event_log")


def counted(p: subprocess.CompletedProcess[str]) -> int:
    assert p.returncode == 0, p.stderr
    header, value = p.stdout.split()
    assert header == "n"
    return int(value)


def listing(folder: Path, *, skip: str = "") -> dict[str, tuple[int, int, int, int]]:
    """Every file of ``folder`` but ``skip``: name -> (size, mtime_ns, owner, mode)."""
    out = {}
    for p in folder.iterdir():
        if p.name != skip:
            st = p.lstat()
            out[p.name] = (st.st_size, st.st_mtime_ns, st.st_uid, st.st_mode)
    return out


def wait_for_rows(db: Path, timeout: float = 60) -> None:
    """Wait, bounded, until the live recording has committed event rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if counted(subprocess.run(count_query(db), capture_output=True, text=True, timeout=60)) > 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"no event rows in {db} within {timeout}s")


@contextmanager
def live_trace(db: Path, exe: Path, standin) -> Iterator[subprocess.Popen[str]]:
    """A trace of ``exe 60`` into ``db`` in a process group of its own, all SIGKILLed when the block exits."""
    argv = gpuscope_cmd(
        "trace",
        "--db",
        str(db),
        "--lib",
        str(standin.cudart),
        "--lib",
        str(standin.cuda),
        "--no-tui",
        "--",
        str(exe),
        "60",
    )
    with background(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=standin.env(), start_new_session=True
    ) as proc:
        try:
            LineReader(proc.stderr).wait_for(lambda line: HEADER_END in line, timeout=60)
            wait_for_rows(db)
            yield proc
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextmanager
def read_only_view(folder: Path) -> Iterator[Path]:
    """``folder`` bind-mounted read-only at a new place (skips where mounting is not allowed)."""
    view = Path(tempfile.mkdtemp(prefix="gpuscope-ro-view-"))
    view.chmod(0o755)
    try:
        p = subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {p.stderr.strip()}")
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True, capture_output=True)
            yield view
        finally:
            if subprocess.run(["umount", str(view)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(view)], check=True)
    finally:
        view.rmdir()


# -- tests -----------------------------------------------------------------------


def test_a_live_trace_is_read_by_root_and_by_another_user_and_nothing_appears_beside_it(
    build_workload, standin, shared_dir
):
    # given a live trace writing its recording (its -shm writable by root only)
    exe = build_workload("cuda_loop.c")
    db = shared_dir / "live.db"
    home = Path(tempfile.gettempdir()) / f"{shared_dir.name}-home"
    try:
        with live_trace(db, exe, standin) as trace:
            assert read_mode(db) is ReadMode.LIVE
            assert not Path(f"{db}-shm").stat().st_mode & 0o022
            names = set(listing(shared_dir))
            # when root and nobody read it
            mine = counted(subprocess.run(count_query(db), capture_output=True, text=True, timeout=60))
            theirs = counted(as_nobody(count_query(db), home))
            # then both read committed rows, and the only files beside it are the trace's own, still root's
            assert mine > 0 and theirs > 0
            assert set(listing(shared_dir)) == names >= {"live.db", "live.db-wal", "live.db-shm"}
            assert {st[2] for st in listing(shared_dir).values()} == {0}
            trace.send_signal(signal.SIGINT)
            assert trace.wait(timeout=60) == 0
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_closed_trace_is_read_from_a_read_only_mount_by_root_and_by_another_user(build_workload, standin, shared_dir):
    # given a trace that ended normally
    exe = build_workload("cuda_loop.c")
    db = shared_dir / "rec.db"
    with live_trace(db, exe, standin) as trace:
        trace.send_signal(signal.SIGINT)
        trace.wait(timeout=60)
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    (rows,) = conn.execute("SELECT count(*) FROM event_log").fetchone()
    conn.close()
    home = Path(tempfile.gettempdir()) / f"{shared_dir.name}-home"
    try:
        # when it is read through a read-only bind mount, by root and by nobody
        with read_only_view(shared_dir) as view:
            before = listing(shared_dir)
            mine = counted(subprocess.run(count_query(view / "rec.db"), capture_output=True, text=True, timeout=60))
            theirs = counted(as_nobody(count_query(view / "rec.db"), home))
            # then every row is read and nothing changed
            assert mine == theirs == rows > 0
            assert listing(shared_dir) == before
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_killed_trace_is_read_completely_and_its_folder_is_left_alone(build_workload, standin, shared_dir, tmp_path):
    # given a trace SIGKILLed while its commits are still in the -wal
    exe = build_workload("cuda_loop.c")
    db = shared_dir / "k.db"
    with live_trace(db, exe, standin) as trace:
        os.kill(trace.pid, signal.SIGKILL)
        trace.wait(timeout=30)
    assert read_mode(db) is ReadMode.KILLED, "precondition: the commits are in the -wal"
    # (what a recovering SQLite sees in a copy, for reference)
    ref = tmp_path / "ref.db"
    shutil.copyfile(db, ref)
    shutil.copyfile(f"{db}-wal", f"{ref}-wal")
    conn = sqlite3.connect(ref)
    (committed,) = conn.execute("SELECT count(*) FROM event_log").fetchone()
    conn.close()
    before = listing(shared_dir)
    sums = [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(shared_dir.iterdir())]
    home = Path(tempfile.gettempdir()) / f"{shared_dir.name}-home"
    try:
        # when root and nobody read it
        env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
        mine = counted(subprocess.run(count_query(db), capture_output=True, text=True, timeout=60, env=env))
        theirs = counted(as_nobody(count_query(db), home))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    # then each read every committed row, and the recording and its folder are byte for byte as they were
    assert mine == theirs == committed > 0
    assert listing(shared_dir) == before
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(shared_dir.iterdir())] == sums


def test_trace_refuses_to_append_to_a_damaged_recording_before_running_the_command(standin, tmp_path):
    # given a recording whose page of oldest events is damaged (appending never reads that page)
    db = recording(tmp_path / "old.db")
    smash(db, leftmost_child(db, root_page(db, "event_log")))
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    marker = tmp_path / "ran"
    # when a trace is asked to append to it
    p = run_gpuscope(
        "trace", "--db", str(db), "--lib", str(standin.cudart), "--", "touch", str(marker), env=standin.env()
    )
    # then it refuses in one line with the fix, runs nothing, and leaves the file as it was
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "is damaged (quick_check: " in errors[0] and str(db) in errors[0]
    assert "--db NEW" in p.stderr and ".recover" in p.stderr
    assert not marker.exists()
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    # and readers refuse it too
    q = run_gpuscope("query", "--db", str(db), "SELECT count(*) FROM events")
    assert q.returncode == 1 and "is damaged" in q.stderr and "fix:" in q.stderr
