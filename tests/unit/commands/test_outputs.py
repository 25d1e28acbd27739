"""Commands that write a file (import, merge, export) never overwrite an input and never leave partial output."""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import pytest

from gpuscope.cli import main
from gpuscope.export import EXPORTERS, ExportOptions, ExportStats
from gpuscope.importers import ingero as ingero_importer
from gpuscope.query.guarded import GuardedReader
from gpuscope.recording import as_gpuscope_file, conversion_cache_dir
from gpuscope.store import merge_recordings as store_merge
from gpuscope.store.connect import connect_reader, connect_writer
from tests.ingero_fixtures import ingero_fixture
from tests.unit.query.builder import build_db

ALIASES = ["same path", "relative path", "symlink", "hard link"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _alias(path: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Another name for ``path``: the same string, a relative path from a sibling folder, a symlink, a hard link."""
    if how == "same path":
        return str(path)
    if how == "relative path":
        elsewhere = path.parent / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        return os.path.join("..", path.name)
    link = path.parent / f"other-name-{how.replace(' ', '-')}.db"
    if how == "symlink":
        link.symlink_to(path)
    else:
        link.hardlink_to(path)
    return str(link)


def _leftovers(folder: Path) -> list[str]:
    """Temporary files the atomic writers make (hidden, ``.NAME.*.tmp``) and SQLite side files."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp") or ".tmp-" in p.name)


def _limit_file_size(limit: int = 64 * 1024) -> None:
    # The kernel refuses writes past RLIMIT_FSIZE with EFBIG once SIGXFSZ is ignored: a real write failure.
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _grown_ingero(path: Path, copies: int) -> Path:
    """The Ingero file at ``path`` with each event repeated ``copies`` more times (new ids, later times)."""
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
    copied = ", ".join("id || '#' || :k" if c == "id" else "timestamp + :k" if c == "timestamp" else c for c in cols)
    for k in range(1, copies + 1):
        conn.execute(
            f"INSERT INTO events({', '.join(cols)}) SELECT {copied} FROM events WHERE id NOT LIKE '%#%'", {"k": k}
        )
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def ingero(tmp_path: Path) -> Path:
    src = tmp_path / "node.db"
    shutil.copyfile(ingero_fixture("sample-gpu-node-02.db"), src)
    return src


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    return build_db(tmp_path / "rec.db", n=200)


def _events(path: Path) -> int:
    conn = connect_reader(path)
    try:
        return int(conn.execute("SELECT count(*) FROM event_log").fetchone()[0])
    finally:
        conn.close()


# -- an output that is also an input is refused ----------------------------------------------------


@pytest.mark.parametrize("how", ALIASES)
def test_import_refuses_an_output_that_is_its_input(
    ingero: Path, how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given an Ingero file and another name for it
    before = _digest(ingero)
    out = _alias(ingero, how, monkeypatch)
    # when it is imported onto itself
    rc = main(["import", str(ingero), "-o", out])
    # then the command refuses with a fix line, and the reference file is byte for byte the same
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "is also an input" in err and "fix: write to a new file" in err and "Traceback" not in err
    assert _digest(ingero) == before


@pytest.mark.parametrize("how", ALIASES)
def test_export_refuses_an_output_that_is_the_recording(
    recording: Path, how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _digest(recording)
    out = _alias(recording, how, monkeypatch)
    rc = main(["export", "--db", str(recording), "-o", out])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "is also an input" in err and "fix: write to a new file" in err
    assert _digest(recording) == before
    assert _events(recording) == 400


@pytest.mark.parametrize("how", ALIASES)
def test_merge_refuses_an_output_that_is_one_of_its_inputs(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a = build_db(tmp_path / "a.db", n=10)
    b = tmp_path / "b.db"
    shutil.copyfile(a, b)  # same content is fine: the refusal is about the output, not the inputs
    before = _digest(b)
    out = _alias(b, how, monkeypatch)
    rc = main(["merge", str(a), str(b), "-o", out])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "is also an input" in err and "fix: write to a new file" in err
    assert _digest(b) == before


@pytest.mark.parametrize("side", ["-wal", "-shm", "-journal"])
def test_an_output_named_like_an_inputs_sqlite_side_file_is_refused(
    recording: Path, side: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording another connection is writing, so its -wal holds committed rows not yet in the file
    writer = connect_writer(recording)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("UPDATE sessions SET hostname = 'changed-in-the-wal'")
        wal = Path(f"{recording}-wal")
        wal_before = wal.read_bytes()
        # when an export is asked to write over the recording's side file
        rc = main(["export", "--db", str(recording), "-o", f"{recording}{side}"])
        # then it is refused and the committed rows in the -wal are still there
        err = capsys.readouterr().err
        assert rc == 2 and "side file" in err, err
        assert wal.read_bytes() == wal_before
    finally:
        writer.close()
    conn = connect_reader(recording)
    assert conn.execute("SELECT hostname FROM sessions").fetchone()[0] == "changed-in-the-wal"
    conn.close()


# -- a database output that is not a plain new file ------------------------------------------------


def test_import_refuses_to_replace_a_recording_a_process_has_open(
    tmp_path: Path, ingero: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording being written right now (this process holds it, as an agent would)
    live = build_db(tmp_path / "live.db", n=10)
    writer = connect_writer(live)
    try:
        inode = live.stat().st_ino
        # when an import is asked to write over it
        rc = main(["import", str(ingero), "-o", str(live)])
        # then it refuses, naming the process, and the recording is the same file
        err = capsys.readouterr().err
        assert rc == 2 and f"pid {os.getpid()}" in err, err
        assert live.stat().st_ino == inode
    finally:
        writer.close()
    assert _events(live) == 20


def test_a_replaced_database_is_not_paired_with_the_old_files_leftover_wal(
    tmp_path: Path, ingero: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given an old output left by a crash: its -wal still holds committed pages (a "hot" WAL)
    old = build_db(tmp_path / "old.db", n=50)
    writer = connect_writer(old)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("DELETE FROM event_log")
    out = tmp_path / "out.db"
    shutil.copyfile(old, out)
    shutil.copyfile(f"{old}-wal", f"{out}-wal")
    writer.close()
    # when an import replaces it
    assert main(["import", str(ingero), "-o", str(out)]) == 0, capsys.readouterr().err
    # then the new file is whole: the old file's WAL was not replayed onto it
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM imported_events").fetchone()[0] > 0
    conn.close()


def test_import_refuses_a_destination_that_is_not_a_regular_file(
    tmp_path: Path, ingero: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    rc = main(["import", str(ingero), "-o", str(fifo)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a regular file" in err, err
    assert fifo.is_fifo()


def _interrupt_after(real: Callable[..., object]) -> Callable[..., object]:
    """``real`` doing all its work, then Ctrl-C before the caller finishes the file."""

    def interrupted(*args: object, **kwargs: object) -> object:
        real(*args, **kwargs)
        raise KeyboardInterrupt

    return interrupted


@pytest.mark.parametrize("command", ["import", "merge"])
def test_an_import_or_merge_interrupted_half_way_leaves_the_previous_output_untouched(
    tmp_path: Path, ingero: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an earlier output, and a run that is interrupted after its rows are written
    out = tmp_path / "out" / "ours.db"
    out.parent.mkdir()
    out.write_bytes(b"an earlier output")
    if command == "import":
        # Where import_file finds it when it converts (it loads the importer then, not at import).
        monkeypatch.setattr(ingero_importer, "import_ingero", _interrupt_after(ingero_importer.import_ingero))
        argv = ["import", str(ingero), "-o", str(out)]
    else:
        monkeypatch.setattr(store_merge, "_merge_one", _interrupt_after(store_merge._merge_one))
        argv = ["merge", str(build_db(tmp_path / "a.db", n=10)), "-o", str(out)]
    # when it runs
    assert main(argv) == 130
    # then the earlier output is as it was, and no temporary file is left
    assert out.read_bytes() == b"an earlier output"
    assert sorted(p.name for p in out.parent.iterdir()) == ["ours.db"]


@pytest.mark.parametrize("command", ["import", "merge"])
def test_an_import_or_merge_that_outgrows_the_file_size_limit_says_so_and_leaves_nothing(
    tmp_path: Path, ingero: Path, command: str
) -> None:
    # given a database output of several MiB, and a process that may write files of 1 MiB (room for the empty schema)
    out = tmp_path / "out" / "ours.db"
    out.parent.mkdir()
    source = _grown_ingero(ingero, 100) if command == "import" else build_db(tmp_path / "a.db", n=20_000)
    # when it is written
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", command, str(source), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: _limit_file_size(1024 * 1024),
        check=False,
    )
    # then the error names the output and the failed write, not a secondary error, and nothing is left
    error = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert p.returncode == 1 and len(error) == 1, p.stderr
    assert str(out) in error[0] and "cannot write" in error[0] and "rollback" not in error[0], p.stderr
    assert "fix: " in p.stderr
    assert list(out.parent.iterdir()) == []


def test_an_interrupted_conversion_leaves_nothing_the_conversion_cache_would_trust(
    tmp_path: Path, ingero: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an empty conversion cache, and a conversion killed after its rows are written
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = ingero_importer.import_ingero
    monkeypatch.setattr(ingero_importer, "import_ingero", _interrupt_after(real))
    with pytest.raises(KeyboardInterrupt):
        as_gpuscope_file(ingero)
    cache = conversion_cache_dir()
    assert list(cache.iterdir()) == []
    # when the file is read again
    monkeypatch.setattr(ingero_importer, "import_ingero", real)
    converted = as_gpuscope_file(ingero)
    # then it is converted afresh, whole
    assert converted.parent == cache and _events(converted) > 0


# -- export: streams to pipes, writes through links, and leaves nothing half-written ---------------


def test_export_to_a_named_pipe_streams_into_it(tmp_path: Path, recording: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with fifo.open("rb") as f:
            received.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert main(["export", "--db", str(recording), "-o", str(fifo)]) == 0
    reader.join(timeout=60)
    assert fifo.is_fifo()  # written in place, never replaced by a regular file
    assert received and received[0].startswith(b'{"traceEvents":[')


def test_export_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path: Path, recording: Path) -> None:
    target = tmp_path / "traces" / "t.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert main(["export", "--db", str(recording), "-o", str(link)]) == 0
    assert link.is_symlink()
    assert target.read_text().startswith('{"traceEvents":[')


class _FailingExporter:
    """The real Perfetto exporter, writing into a stream that fails after ``after`` characters."""

    name = "perfetto"
    description = "fails half-way"

    def __init__(self, error: BaseException, after: int = 2_000) -> None:
        self.error, self.after = error, after

    def export(self, reader: GuardedReader, out: TextIO, options: ExportOptions) -> ExportStats:
        # _Failing is a write-only stand-in for the stream: writing is all an exporter does with it
        return EXPORTERS_REAL.export(reader, _Failing(out, self.error, self.after), options)  # type: ignore[arg-type]


class _Failing:
    def __init__(self, out: TextIO, error: BaseException, after: int) -> None:
        self.out, self.error, self.left = out, error, after

    def write(self, text: str) -> int:
        if self.left <= 0:
            raise self.error
        self.left -= len(text)
        return self.out.write(text)


EXPORTERS_REAL = EXPORTERS["perfetto"]


@pytest.fixture(params=["no previous output", "a previous output"])
def previous(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, bytes | None]]:
    out = tmp_path / "out" / "trace.json"
    out.parent.mkdir()
    content = b'{"an earlier": "export"}' if request.param == "a previous output" else None
    if content is not None:
        out.write_bytes(content)
    yield out, content


def _assert_untouched(out: Path, content: bytes | None) -> None:
    if content is None:
        assert not out.exists()
    else:
        assert out.read_bytes() == content
    assert _leftovers(out.parent) == []


@pytest.mark.parametrize(
    ("failure", "rc", "message"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), 1, "No space left on device"),
        (KeyboardInterrupt(), 130, ""),
    ],
    ids=["disk full", "ctrl-c"],
)
def test_an_export_that_fails_half_way_leaves_no_partial_output(
    recording: Path,
    previous: tuple[Path, bytes | None],
    failure: BaseException,
    rc: int,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, content = previous
    monkeypatch.setitem(EXPORTERS, "perfetto", _FailingExporter(failure))
    assert main(["export", "--db", str(recording), "-o", str(out)]) == rc
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    _assert_untouched(out, content)


def test_an_export_whose_rename_is_refused_leaves_no_partial_output(
    recording: Path,
    previous: tuple[Path, bytes | None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given a folder that no longer lets the finished file take its name (as when it is made read-only mid-way)
    out, content = previous

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(dst))

    monkeypatch.setattr("gpuscope.platform.files.os.replace", refuse)
    assert main(["export", "--db", str(recording), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert err.startswith("error: ") and "Permission denied" in err and "Traceback" not in err
    _assert_untouched(out, content)


def test_an_export_of_a_recording_corrupt_part_way_leaves_no_partial_output(
    tmp_path: Path, previous: tuple[Path, bytes | None], capsys: pytest.CaptureFixture[str]
) -> None:
    # given a recording whose later pages are garbage (the first pages, with the schema, are intact)
    db = build_db(tmp_path / "big.db", n=20_000)
    size = db.stat().st_size
    with db.open("r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(b"\xa5" * (size // 4))
    out, content = previous
    # when it is exported
    rc = main(["export", "--db", str(db), "-o", str(out)])
    # then the error is one line and no half-written trace is left
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: ") and "Traceback" not in err, err
    _assert_untouched(out, content)


def test_an_export_that_outgrows_the_file_size_limit_leaves_no_partial_output(
    tmp_path: Path, previous: tuple[Path, bytes | None]
) -> None:
    # given a recording whose trace is far larger than the 64 KiB the export may write
    recording = build_db(tmp_path / "big.db", n=2_000)
    out, content = previous
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "export", "--db", str(recording), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size,
        check=False,
    )
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("error: ") and "File too large" in p.stderr and "Traceback" not in p.stderr
    _assert_untouched(out, content)


def test_export_to_stdout_still_streams(recording: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--db", str(recording), "-o", "-"]) == 0
    assert capfd.readouterr().out.startswith('{"traceEvents":[')
