"""Recordings survive: readers, the size cap, SIGKILL and a full disk never cost committed data.

Each test runs `gpuscope trace --record-all` over `cuda_hammer` (two threads
calling cudaLaunchKernel back to back, which prints the exact number of calls
it made) and checks the recording afterwards: every call is a stored row, a
kernel drop, or (under the cap) counted in the aggregates.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.privileged.support import LineReader, background, gpuscope_cmd

SQLITE3_CLI = shutil.which("sqlite3")
HEADER_END = "Hit Ctrl-C to end."


# -- helpers -------------------------------------------------------------------


def calls_made(stdout: str) -> int:
    """The exact call count the workload printed ("calls N")."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("calls ")]
    return int(line.split()[1])


def trace_argv(db: Path, standin, *extra: str, command: list[str]) -> list[str]:
    """`gpuscope trace` probing only the stand-in libraries, plain output."""
    libs = ["--lib", str(standin.cudart), "--lib", str(standin.cuda)]
    return gpuscope_cmd("trace", "--db", str(db), *libs, "--no-tui", "--record-all", *extra, "--", *command)


def read(db: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def the_session(db: Path) -> dict[str, object]:
    """The one session row of a recording, with its drops parsed."""
    cols = ("stopped_wall_ns", "committed_wall_ns", "committed_mono_ns", "end_reason", "events_recorded", "drops")
    (row,) = read(db, f"SELECT {', '.join(cols)} FROM sessions")
    out = dict(zip(cols, row, strict=True))
    out["drops"] = json.loads(str(row[-1])) if row[-1] else {}
    return out


def stored_launches(db: Path) -> int:
    n = read(db, "SELECT count(*) FROM events WHERE op = 'cudaLaunchKernel'")[0][0]
    assert isinstance(n, int), n
    return n


def aggregated_launches(db: Path) -> int:
    (n,) = read(db, "SELECT coalesce(sum(count), 0) FROM aggregates WHERE op = 'cudaLaunchKernel'")[0]
    assert isinstance(n, int), n
    return n


@contextmanager
def process_group(cmd: list[str], **kw) -> Iterator[subprocess.Popen[str]]:
    """``cmd`` in a process group of its own, all of which is SIGKILLed when the block exits.

    The traced workload outlives a killed agent; killing the group by its id
    ends exactly the processes this test started.
    """
    with background(cmd, start_new_session=True, **kw) as proc:
        try:
            yield proc
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class ReaderLoop:
    """Run one reading command over and over on a thread until stopped; keep every outcome.

    ``stop`` kills a run still in flight (by its pid): what it would have
    printed after the trace ended says nothing about the trace. Nor does a run
    that ended after it (``failures(until=...)``): once the agent's connection
    has closed, the last reader to close holds SQLite's exclusive lock while it
    cleans up the WAL, and a ``sqlite3`` shell opening then, with no busy
    timeout, fails with "database is locked" (SQLite's wal.html, "Sometimes
    queries return SQLITE_BUSY in WAL mode").
    """

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        self.outcomes: list[tuple[int, str, float]] = []  # exit status, stderr, when it ended (monotonic)
        self.succeeded = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._loop, name=f"reader-{name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stop.is_set():
                    return
                proc = self._proc = subprocess.Popen(
                    self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
                )
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                err = f"still running after 60 s: {err}"
            if self._stop.is_set() and proc.returncode == -signal.SIGKILL:
                return  # ended by stop()
            self.outcomes.append((proc.returncode, err.strip()[-400:], time.monotonic()))
            if proc.returncode == 0:
                self.succeeded.set()

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
        self._thread.join(timeout=90)

    def failures(self, until: float | None = None) -> list[str]:
        """The runs that failed (of those that ended by ``until``, a monotonic time, when given)."""
        return [
            f"{self.name} exit {rc}: {err}"
            for rc, err, ended in self.outcomes
            if rc != 0 and (until is None or ended <= until)
        ]


class SizeSampler:
    """Sample the size of a recording, its WAL, shared memory and reserve every ~5 ms on a thread (stat only)."""

    def __init__(self, db: Path) -> None:
        self.paths = [str(db), f"{db}-wal", f"{db}-shm", f"{db}-reserve"]
        self.peak = 0
        self.peak_parts: tuple[int, ...] = ()
        self.samples = 0
        # Every sample (a few thousand a run): a failure shows the sizes around the peak.
        self.history: list[tuple[float, tuple[int, ...]]] = []
        self.peak_at = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="size-sampler", daemon=True)
        self._thread.start()

    def _sizes(self) -> tuple[int, ...]:
        sizes = []
        for p in self.paths:
            try:
                sizes.append(os.stat(p).st_size)
            except OSError:
                sizes.append(0)
        return tuple(sizes)

    def _loop(self) -> None:
        while not self._stop.wait(0.005):
            parts = self._sizes()
            self.history.append((time.monotonic(), parts))
            if sum(parts) > self.peak:
                self.peak, self.peak_parts = sum(parts), parts
                self.peak_at = len(self.history) - 1
            self.samples += 1

    def around_peak(self, before: int = 20, after: int = 5) -> list[tuple[float, tuple[int, ...]]]:
        """(seconds since the first sample, sizes) of the samples just before and after the peak."""
        t0 = self.history[0][0] if self.history else 0.0
        window = self.history[max(0, self.peak_at - before) : self.peak_at + after]
        return [(round(t - t0, 3), parts) for t, parts in window]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs("40m")`` -> a fresh directory on a tmpfs of that size, unmounted at teardown."""
    mounts: list[Path] = []

    def mount(size: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        where = tmp_path / f"tmpfs{len(mounts)}"
        where.mkdir()
        p = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
        )
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {p.stderr.strip()}")
        mounts.append(where)
        return where

    yield mount
    for where in reversed(mounts):
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            # Something still holds a file there: detach it anyway, never leave a mount behind.
            subprocess.run(["umount", "-l", str(where)], check=True)


# -- a. readers ----------------------------------------------------------------


@pytest.mark.parametrize("round_", [1, 2, 3])
def test_readers_in_loops_never_hurt_the_agent_and_every_call_is_stored_or_counted_dropped(
    round_, build_workload, standin, tmp_path
):
    # given a trace whose workload waits for a go-ahead, so readers are running before it calls
    # (an 8 MiB ring: a full 32 MiB one takes seconds to drain on a CPU shared with five readers)
    exe = build_workload("cuda_hammer.c")
    db = tmp_path / "rec.db"
    gate = tmp_path / "go"
    os.mkfifo(gate)
    command = ["sh", "-c", f"read go < {gate}; exec {exe} 500000 2"]
    readers: list[ReaderLoop] = []
    with process_group(
        trace_argv(db, standin, "--ring-size", "8m", command=command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=standin.env(),
    ) as trace:
        out, err = LineReader(trace.stdout), LineReader(trace.stderr)
        try:
            err.wait_for(lambda line: HEADER_END in line, timeout=60)
            # when query, explain, stacks, export and the sqlite3 shell read the recording in loops
            readers = [
                ReaderLoop("query", gpuscope_cmd("query", "--db", str(db), "--json", "SELECT count(*) FROM events")),
                ReaderLoop("explain", gpuscope_cmd("explain", "--db", str(db))),
                ReaderLoop("stacks", gpuscope_cmd("stacks", "--db", str(db), "--json")),
                ReaderLoop("export", gpuscope_cmd("export", "--db", str(db), "-o", str(tmp_path / "export.json"))),
            ]
            if SQLITE3_CLI:
                readers.append(ReaderLoop("sqlite3", [SQLITE3_CLI, str(db), "select count(*) from event_log"]))
            for r in readers:
                assert r.succeeded.wait(timeout=60), r.failures()
            # and the workload starts calling while they go on
            with open(gate, "w") as go:
                go.write("go\n")
            trace.wait(timeout=120)
            traced_until = time.monotonic()
        finally:
            for r in readers:
                r.stop()
        stdout, stderr = out.rest(timeout=10), err.rest(timeout=10)
    # then the trace ended normally and closed its session
    assert trace.returncode == 0, stderr
    assert "Traceback" not in stderr
    session = the_session(db)
    assert session["stopped_wall_ns"] is not None and session["end_reason"] == "stopped", session
    # and every call the workload made is a stored row or a drop counted in the kernel, exactly
    made = calls_made(stdout)
    assert made == 1_000_000
    drops = session["drops"]
    assert isinstance(drops, dict)
    assert stored_launches(db) + drops["drop_cuda"] == made, (stored_launches(db), drops)
    # and the readers were not hurt either, nor was the file
    assert [f for r in readers for f in r.failures(until=traced_until)] == []
    assert read(db, "PRAGMA integrity_check") == [("ok",)]


# -- b. the size cap -------------------------------------------------------------


@pytest.mark.parametrize(
    ("with_reader", "cap"),
    [(False, "5m"), (True, "5m"), (True, "1m")],
    ids=["alone", "with-a-reader-looping", "1-mib-with-a-reader-looping"],
)
def test_max_db_holds_for_file_wal_and_shm_at_every_moment_with_exact_aggregates(
    with_reader, cap, build_workload, standin, tmpfs
):
    # given a 40 MB file system and a workload that writes far more than the cap
    # (1 MiB with a reader: the pinned WAL once grew to 213 % of it, the reserve beside it not counted)
    exe = build_workload("cuda_hammer.c")
    db = tmpfs("40m") / "rec.db"
    cap_bytes = int(cap[:-1]) << 20
    argv = trace_argv(db, standin, "--max-db", cap, command=[str(exe), "600000", "2"])
    reader: ReaderLoop | None = None
    with process_group(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=standin.env()) as trace:
        out, err = LineReader(trace.stdout), LineReader(trace.stderr)
        # when the size of the recording is sampled every ~5 ms through the whole run
        sampler = SizeSampler(db)
        try:
            if with_reader:
                err.wait_for(lambda line: HEADER_END in line, timeout=60)
                reader = ReaderLoop(
                    "query", gpuscope_cmd("query", "--db", str(db), "--json", "SELECT count(*) FROM event_log")
                )
            trace.wait(timeout=120)
        finally:
            sampler.stop()
            if reader is not None:
                reader.stop()
        stdout, stderr = out.rest(timeout=10), err.rest(timeout=10)
    # then the trace ended normally, the disk never filled
    assert trace.returncode == 0, stderr
    assert "disk is full" not in stderr and "Traceback" not in stderr
    # and file + WAL + shared memory + the reserve beside them never passed the cap
    assert sampler.samples > 100
    assert sampler.peak <= cap_bytes, (
        f"peak {sampler.peak:,} B (file, WAL, shm, reserve: {sampler.peak_parts}) over {sampler.samples} samples; "
        f"around it: {sampler.around_peak()}"
    )
    # and the aggregates count every call the kernel handed over, exactly
    made = calls_made(stdout)
    session = the_session(db)
    drops = session["drops"]
    assert isinstance(drops, dict)
    assert session["end_reason"] == "stopped"
    assert aggregated_launches(db) + drops["drop_cuda"] == made, (aggregated_launches(db), drops)
    # and far fewer rows are kept than were made (the oldest went first); rows shed are counted, never hidden
    assert stored_launches(db) < made // 4
    first_id = read(db, "SELECT min(id) FROM event_log")[0][0]
    assert isinstance(first_id, int) and first_id > 1, first_id
    assert "rows_shed_db_cap" in drops
    if reader is not None:
        assert reader.outcomes, "the reader never ran"
        assert reader.failures() == []


# -- c. SIGKILL -------------------------------------------------------------------


@pytest.mark.parametrize("run", [1, 2, 3])
def test_a_sigkilled_agent_leaves_a_readable_file_complete_up_to_its_committed_time(
    run, build_workload, standin, tmp_path
):
    # given a busy trace (the workload runs far longer than the test waits)
    exe = build_workload("cuda_hammer.c")
    db = tmp_path / "rec.db"
    delay = random.uniform(1.5, 4.0)
    with process_group(
        trace_argv(db, standin, command=[str(exe), "4000000", "2"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=standin.env(),
    ) as trace:
        err = LineReader(trace.stderr)
        err.wait_for(lambda line: HEADER_END in line, timeout=60)
        # when it is SIGKILLed at a random moment (the wait is the moment chosen, not a synchronisation)
        time.sleep(delay)
        assert trace.poll() is None, err.rest(timeout=5)
        killed_wall_ns = time.time_ns()
        os.kill(trace.pid, signal.SIGKILL)
        trace.wait(timeout=30)
    # then the file opens and is intact
    assert read(db, "PRAGMA integrity_check") == [("ok",)]
    query = subprocess.run(
        gpuscope_cmd("query", "--db", str(db), "--json", "SELECT count(*) AS n FROM event_log"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert query.returncode == 0, query.stderr
    # and the session is not closed, but says up to when its data is complete: shortly before the kill
    session = the_session(db)
    assert session["stopped_wall_ns"] is None and session["end_reason"] is None, session
    committed_wall = session["committed_wall_ns"]
    committed_mono = session["committed_mono_ns"]
    assert isinstance(committed_wall, int) and isinstance(committed_mono, int), session
    lost_s = (killed_wall_ns - committed_wall) / 1e9
    assert 0 <= lost_s <= 3.0, f"killed {delay:.2f} s in, committed up to {lost_s:.3f} s before the kill"
    # and the rows are one unbroken run (no transaction torn out of the middle)
    ((lo, hi, n),) = read(db, "SELECT min(id), max(id), count(*) FROM event_log")
    assert isinstance(n, int) and n > 0 and (lo, hi) == (1, n), (lo, hi, n)
    # and "complete up to" is no later than what is stored: with the ring full, events read last end at most a
    # poll before it (a mark at the read time claimed 0.8-2.3 s of events still in the ring)
    ((last_end,),) = read(db, "SELECT max(ts_ns + duration_ns) FROM event_log")
    assert isinstance(last_end, int), last_end
    assert committed_mono - last_end <= 200_000_000, (committed_mono - last_end) / 1e9
    # and the session row counts what the file holds (every event stored: --record-all)
    assert session["events_recorded"] == n, (session["events_recorded"], n)
    # and the exact counts cover the stored calls up to shortly before the committed time: they are
    # written in order with the rows, so they count a prefix of them
    counted = aggregated_launches(db)
    launches = read(db, "SELECT ts_ns FROM events WHERE op = 'cudaLaunchKernel' ORDER BY id")
    assert 0 < counted <= len(launches), (counted, len(launches))
    last_counted_ns = launches[counted - 1][0]
    assert isinstance(last_counted_ns, int), last_counted_ns
    assert committed_mono - last_counted_ns <= 3_000_000_000, (committed_mono - last_counted_ns) / 1e9


# -- d. a full disk ---------------------------------------------------------------


def test_a_full_disk_closes_the_session_and_the_workload_runs_on_to_its_end(build_workload, standin, tmpfs):
    # given an 8 MB file system, no cap, and a workload that would write far more
    exe = build_workload("cuda_hammer.c")
    where = tmpfs("8m")
    db = where / "rec.db"
    command = ["bash", "-c", f"{exe} 1500000 2; echo status $?"]
    # when it is traced until the disk fills
    with process_group(
        trace_argv(db, standin, command=command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=standin.env()
    ) as trace:
        stdout, stderr = trace.communicate(timeout=120)
    # then gpuscope fails with one error and its fix, no traceback
    assert trace.returncode == 1, stderr
    assert "recording stopped" in stderr
    assert any(line.lstrip().startswith("fix:") for line in stderr.splitlines()), stderr
    assert "Traceback" not in stderr
    # and the workload was not killed: it made every call and exited 0
    assert calls_made(stdout) == 3_000_000
    assert "status 0" in stdout.splitlines(), stdout
    # and the session is closed, saying why, and the reserved space was given back
    session = the_session(db)
    assert session["stopped_wall_ns"] is not None and session["end_reason"] == "disk full", session
    # and it is complete up to its last commit, before the failure, not up to when it was closed
    committed, stopped = session["committed_wall_ns"], session["stopped_wall_ns"]
    assert isinstance(committed, int) and isinstance(stopped, int) and committed < stopped, session
    assert not Path(f"{db}-reserve").exists()
    assert read(db, "PRAGMA integrity_check") == [("ok",)]
    assert stored_launches(db) > 0
