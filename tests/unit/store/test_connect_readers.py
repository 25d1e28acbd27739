"""Readers leave no trace: no file is created, changed or owned beside a recording, whoever holds it.

Writers here are real processes (a Python process holding a write connection
in WAL mode), because who holds a recording is read from the kernel's lock
table. Tests that need another user run as ``nobody`` and are skipped when
this process cannot switch users.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuscope.errors import DatabaseError
from gpuscope.recording import open_recording
from gpuscope.store.connect import ReadMode, connect_reader, read_mode
from tests.other_user import as_nobody, open_folder
from tests.unit.analysis.builder import Events, steady_training

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")

# A writer that commits ``N`` event rows, one transaction each, says so, then obeys stdin:
# "close" closes its connection (and it stays alive); end of input ends it.
WRITER = """
import sys
from gpuscope.store.connect import connect_writer
conn = connect_writer(sys.argv[1])
if conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0:
    conn.execute("INSERT INTO sessions(uuid, node, started_wall_ns, started_mono_ns) VALUES ('w', 'n', 0, 0)")
sid = conn.execute("SELECT max(id) FROM sessions").fetchone()[0]
for i in range(int(sys.argv[2])):
    conn.execute(
        "INSERT INTO event_log(session_id, ts_ns, duration_ns, pid, tid, cgroup_id, op_id, flags, ret, bytes, "
        "handle, stream, arg0, arg1) VALUES (?, ?, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0)",
        (sid, i),
    )
print("committed", flush=True)
for line in sys.stdin:
    if line.strip() == "close":
        conn.close()
        print("closed", flush=True)
"""

# Open, count and close ``N`` times, as every read command does; print the last count.
READER = """
import sys
from gpuscope.recording import open_recording
for _ in range(int(sys.argv[2])):
    conn = open_recording(sys.argv[1])
    n = conn.execute("SELECT count(*) FROM event_log").fetchone()[0]
    conn.close()
print(n)
"""


# -- helpers -------------------------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user can reach (pytest's own are private to root), removed afterwards."""
    with open_folder("gpuscope-readers-") as d:
        yield d


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's per-user cache, where snapshots of killed recordings go."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def recording(path: Path) -> Path:
    """A closed recording of ``EVENTS`` events, readable by everyone."""
    ev = Events()
    steady_training(ev, 40)
    assert len(ev.rows) == EVENTS
    ev.to_db(path)
    path.chmod(0o644)
    return path


EVENTS = 80  # what ``steady_training(ev, 40)`` adds: counted here so no test reads a file before its reader does


def listing(folder: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every file of ``folder``: name -> (size, mtime_ns, owner, mode)."""
    out = {}
    for p in folder.iterdir():
        st = p.lstat()
        out[p.name] = (st.st_size, st.st_mtime_ns, st.st_uid, st.st_mode)
    return out


def digest(*paths: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


def count(path: Path) -> int:
    conn = open_recording(path)
    try:
        return int(conn.execute("SELECT count(*) FROM event_log").fetchone()[0])
    finally:
        conn.close()


@contextmanager
def writer(db: Path, rows: int) -> Iterator[subprocess.Popen[str]]:
    """A live writer process that has committed ``rows`` rows to ``db``; killed when the block exits."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(rows)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "committed"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def killed_writer(db: Path, rows: int) -> None:
    """Leave ``db`` as a writer SIGKILLed after committing ``rows`` rows does: commits in its -wal."""
    with writer(db, rows) as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert Path(f"{db}-wal").stat().st_size > 32, "precondition: the commits are still in the -wal"


def gpuscope_query(db: Path, sql: str = "SELECT count(*) AS n FROM events") -> list[str]:
    return [sys.executable, "-m", "gpuscope", "query", "--db", str(db), "--csv", sql]


# -- closed recordings ---------------------------------------------------------------


def test_a_closed_recording_is_read_immutable(tmp_path: Path) -> None:
    db = recording(tmp_path / "r.db")
    assert read_mode(db) is ReadMode.CLOSED


def test_reading_a_closed_recording_hundreds_of_times_creates_no_file_beside_it(tmp_path: Path) -> None:
    # given a closed recording (in WAL mode, as every trace leaves it)
    db = recording(tmp_path / "r.db")
    before = listing(tmp_path)
    # when it is opened, queried and closed 300 times here while four other processes do the same 50 times each
    others = [
        subprocess.Popen([sys.executable, "-c", READER, str(db), "50"], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    counts = {count(db) for _ in range(300)}
    outputs = [p.communicate(timeout=120)[0] for p in others]
    # then every read saw every row, and the folder is exactly as it was
    assert [p.returncode for p in others] == [0] * 4
    assert counts == {int(out) for out in outputs} and len(counts) == 1 and counts.pop() > 0
    assert listing(tmp_path) == before


def test_concurrent_readers_in_one_process_leave_no_file_either(tmp_path: Path) -> None:
    db = recording(tmp_path / "r.db")
    before = listing(tmp_path)
    seen: list[int] = []

    def read_many() -> None:
        seen.extend(count(db) for _ in range(50))

    threads = [threading.Thread(target=read_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(seen) == 200 and len(set(seen)) == 1
    assert listing(tmp_path) == before


def test_a_closed_recording_is_read_from_a_read_only_folder(shared_dir: Path) -> None:
    # given a closed recording in a folder nobody may write (root ignores modes, so read as nobody)
    db = recording(shared_dir / "r.db")
    shared_dir.chmod(0o555)
    before = listing(shared_dir)
    argv = [sys.executable, "-c", READER, str(db), "3"]
    # when it is read
    home = Path(tempfile.gettempdir()) / f"{shared_dir.name}-home"
    try:
        p = as_nobody(argv, home) if os.geteuid() == 0 else subprocess.run(argv, capture_output=True, text=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    # then it reads all of it, and the folder is unchanged
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == EVENTS
    assert listing(shared_dir) == before


@needs_root
def test_another_user_reads_a_closed_recording_and_owns_nothing_beside_it(shared_dir: Path) -> None:
    db = recording(shared_dir / "r.db")
    before = listing(shared_dir)
    p = as_nobody(gpuscope_query(db), shared_dir / "home")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["n", str(EVENTS)]
    after = listing(shared_dir)
    del after["home"]
    assert after == before


# -- live recordings -------------------------------------------------------------------


def test_a_recording_held_by_a_live_writer_is_read_through_its_wal(tmp_path: Path) -> None:
    # given a writer process that has committed rows and keeps the recording open
    db = tmp_path / "live.db"
    with writer(db, 500):
        # when it is read
        assert read_mode(db) is ReadMode.LIVE
        names = set(listing(tmp_path))
        conn = connect_reader(db)
        try:
            rows = conn.execute("SELECT count(*) FROM event_log").fetchone()[0]
        finally:
            conn.close()
        # then the committed rows are there and the writer's files are the only ones
        assert rows == 500
        assert set(listing(tmp_path)) == names == {"live.db", "live.db-wal", "live.db-shm"}


def test_a_read_only_connection_never_deletes_or_truncates_the_wal_or_shm_on_close(tmp_path: Path, cache: Path) -> None:
    # given a live writer and a reader of its recording
    db, wal, shm = tmp_path / "live.db", tmp_path / "live.db-wal", tmp_path / "live.db-shm"
    with writer(db, 300) as proc:
        conn = connect_reader(db)
        assert conn.execute("SELECT count(*) FROM event_log").fetchone()[0] == 300
        # when the writer closes while the reader still reads, and then the reader closes last
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("close\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "closed"
        sizes = (wal.stat().st_size, shm.stat().st_size)
        conn.close()
        # then neither file was deleted or truncated by the reader
        assert (wal.stat().st_size, shm.stat().st_size) == sizes
    assert sizes[0] > 32
    # and what the writer committed is still read in full
    assert count(db) == 300


@needs_root
def test_another_user_reads_a_live_recording_whose_shared_memory_it_may_not_write(shared_dir: Path) -> None:
    # given a recording held by a writer of root, its -shm writable by root only
    db = shared_dir / "live.db"
    with writer(db, 400):
        assert not Path(f"{db}-shm").stat().st_mode & 0o022
        before = listing(shared_dir)
        # when nobody reads it
        p = as_nobody(gpuscope_query(db), shared_dir / "home")
        # then it reads every committed row and changed nothing beside the recording
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == ["n", "400"]
        after = listing(shared_dir)
        del after["home"]
        assert after == before


# -- killed writers ----------------------------------------------------------------------


def test_a_killed_writer_is_read_completely_from_a_private_snapshot(tmp_path: Path, cache: Path) -> None:
    # given a recording whose writer was SIGKILLed after committing 700 rows
    folder = tmp_path / "rec"
    folder.mkdir()
    db, wal = folder / "k.db", folder / "k.db-wal"
    killed_writer(db, 700)
    before, sums = listing(folder), digest(db, wal)
    # when it is read, twice
    assert read_mode(db) is ReadMode.KILLED
    first = count(db)
    snapshots = list((cache / "gpuscope" / "snapshots").glob("*.db"))
    second = count(db)
    # then every committed row is read, from one private copy made once, and the folder is untouched
    assert first == second == 700
    assert len(snapshots) == 1
    assert list((cache / "gpuscope" / "snapshots").glob("*.db")) == snapshots
    assert listing(folder) == before and digest(db, wal) == sums


def test_a_recording_killed_again_gets_a_fresh_snapshot_and_the_stale_one_goes(tmp_path: Path, cache: Path) -> None:
    db = tmp_path / "k.db"
    killed_writer(db, 100)
    assert count(db) == 100
    # when a second writer appends to it and is killed too
    killed_writer(db, 50)
    # then the new commits are read and only the newest copy is kept
    assert count(db) == 150
    assert len(list((cache / "gpuscope" / "snapshots").glob("*.db"))) == 1


def test_snapshots_unused_for_a_week_are_removed_when_the_next_is_made(tmp_path: Path, cache: Path) -> None:
    # given snapshots of two killed recordings, both last made or used eight days ago
    used, forgotten, fresh = tmp_path / "used.db", tmp_path / "forgotten.db", tmp_path / "fresh.db"
    for db in (used, forgotten, fresh):
        killed_writer(db, 10)
    assert count(used) == count(forgotten) == 10
    snapshots = cache / "gpuscope" / "snapshots"
    week_ago = time.time() - 8 * 24 * 3600
    for snap in snapshots.glob("*.db"):
        os.utime(snap, (week_ago, week_ago))
    # when one is read again, and then a third recording needs a snapshot of its own
    assert count(used) == 10
    assert count(fresh) == 10
    # then the snapshot read again is kept, the forgotten one is gone
    names = sorted(p.name.split(".db-")[0] for p in snapshots.glob("*.db"))
    assert names == ["fresh", "used"]


def test_a_killed_recording_is_read_from_a_read_only_folder(shared_dir: Path) -> None:
    db = shared_dir / "k.db"
    killed_writer(db, 250)
    shared_dir.chmod(0o555)
    before = listing(shared_dir)
    argv = [sys.executable, "-c", READER, str(db), "2"]
    home = Path(tempfile.gettempdir()) / f"{shared_dir.name}-home"
    try:
        if os.geteuid() == 0:
            p = as_nobody(argv, home)
        else:
            p = subprocess.run(
                argv, capture_output=True, text=True, timeout=120, env=dict(os.environ, XDG_CACHE_HOME=str(home))
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == 250
    assert listing(shared_dir) == before


# Add 1 to every duration in a rollback-journal file with a one-page cache, so changed pages reach
# the file before the commit; say so and wait to be killed mid-transaction.
HALF_WRITE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size=1")
conn.execute("BEGIN")
conn.execute("UPDATE event_log SET duration_ns = duration_ns + 1")
print("uncommitted", flush=True)
sys.stdin.read()
"""


def test_a_writer_killed_mid_transaction_in_rollback_mode_is_read_as_it_was_before(tmp_path: Path, cache: Path) -> None:
    # given a recording in rollback-journal mode (as a converted or foreign file may be) whose writer was
    # killed while changing every row: the file holds half-written pages, its -journal the old ones
    folder = tmp_path / "rec"
    folder.mkdir()
    ev = Events()
    steady_training(ev, 1500)
    db = ev.to_db(folder / "r.db")
    durations = sum(row[1] for row in ev.rows)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    proc = subprocess.Popen(
        [sys.executable, "-c", HALF_WRITE, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "uncommitted"
    proc.kill()
    proc.wait(timeout=30)
    assert Path(f"{db}-journal").stat().st_size > 0, "precondition: a hot journal"
    before = listing(folder)
    # when it is read
    assert read_mode(db) is ReadMode.KILLED
    reader = connect_reader(db)
    try:
        read = reader.execute("SELECT sum(duration_ns) FROM event_log").fetchone()[0]
    finally:
        reader.close()
    # then it reads the last commit, not the half-written pages, and nothing beside it changed
    assert read == durations
    assert listing(folder) == before


# -- permissions -------------------------------------------------------------------------


@needs_root
def test_an_unreadable_recording_is_refused_with_permission_denied(shared_dir: Path) -> None:
    db = recording(shared_dir / "private.db")
    db.chmod(0o600)
    p = as_nobody(gpuscope_query(db), shared_dir / "home")
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    assert lines[0].startswith("error: ") and "permission denied" in lines[0] and str(db) in lines[0]
    assert lines[1].strip().startswith("fix: ") and "Traceback" not in p.stderr


def test_a_writer_in_a_read_only_folder_is_refused_with_permission_denied(shared_dir: Path) -> None:
    # given an existing recording in a folder the writer may not write (no room for its -wal and -shm)
    db = recording(shared_dir / "r.db")
    db.chmod(0o666)
    shared_dir.chmod(0o555)
    before = listing(shared_dir)
    code = (
        "import sys\nfrom gpuscope.errors import DatabaseError\nfrom gpuscope.store.connect import connect_writer\n"
        "try:\n    connect_writer(sys.argv[1])\nexcept DatabaseError as exc:\n    print(exc.render())\n"
    )
    argv = [sys.executable, "-c", code, str(db)]
    home = Path(tempfile.gettempdir()) / f"{shared_dir.name}-home"
    try:
        p = as_nobody(argv, home) if os.geteuid() == 0 else subprocess.run(argv, capture_output=True, text=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    # then the refusal says permission denied (not "cannot write"), with a fix, and nothing changed
    first, fix = p.stdout.splitlines()
    assert "permission denied" in first and "cannot write" not in first and str(shared_dir) in first
    assert fix.strip().startswith("fix: ")
    assert listing(shared_dir) == before


def test_a_missing_recording_is_still_no_such_database(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="no such database"):
        connect_reader(tmp_path / "none.db")
    with pytest.raises(DatabaseError, match="no such database"):
        connect_reader(tmp_path)
