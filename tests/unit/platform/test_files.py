"""atomic_output and refuse_same_file: outputs are whole or absent, and never an input under another name."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuscope.errors import UsageError
from gpuscope.platform.files import (
    OutputBusyError,
    OutputError,
    SameFileError,
    atomic_output,
    refuse_same_file,
)
from gpuscope.platform.links import PlantedLinkError
from tests.other_user import NOBODY, needs_root_to_plant, plant_link, shared_folder
from tests.pids import dead_pid


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    yield
    os.umask(old)


# -- atomic_output ----------------------------------------------------------------------------------


def test_the_output_appears_only_when_the_block_ends_and_no_temporary_is_left(tmp_path: Path) -> None:
    dest = tmp_path / "out.json"
    with atomic_output(dest) as tmp:
        # the temporary file is hidden, in the destination's own folder (so the rename is atomic)
        assert tmp.parent == tmp_path and tmp.name.startswith(".out.json.") and tmp.name.endswith(".tmp")
        tmp.write_text("complete")
        assert not dest.exists()
    assert dest.read_text() == "complete"
    assert _names(tmp_path) == ["out.json"]


@pytest.mark.parametrize("failure", [ValueError("bad input"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
@pytest.mark.parametrize("previous", [None, "earlier"], ids=["new", "existing"])
def test_a_failure_in_the_block_removes_the_temporary_and_its_sqlite_side_files(
    tmp_path: Path, failure: BaseException, previous: str | None
) -> None:
    # given an output that may already exist
    dest = tmp_path / "out.db"
    if previous is not None:
        dest.write_text(previous)
    # when the block writes half a database (with the side files SQLite makes) and fails
    with pytest.raises(type(failure)), atomic_output(dest) as tmp:
        tmp.write_text("half")
        for side in ("-wal", "-shm", "-journal"):
            Path(f"{tmp}{side}").write_text("x")
        raise failure
    # then the folder holds what it held before, byte for byte
    assert _names(tmp_path) == ([] if previous is None else ["out.db"])
    if previous is not None:
        assert dest.read_text() == previous


def test_the_data_is_synced_to_disk_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # given a record of the syscalls that make the output durable
    calls: list[tuple[str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.fstat(fd).st_ino))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        calls.append(("replace", os.stat(src).st_ino))
        real_replace(src, dst)

    monkeypatch.setattr("gpuscope.platform.files.os.fsync", fsync)
    monkeypatch.setattr("gpuscope.platform.files.os.replace", replace)
    # when an output is written
    with atomic_output(tmp_path / "out.json") as tmp:
        tmp.write_text("data")
        inode = tmp.stat().st_ino
    monkeypatch.undo()
    # then the file is synced, renamed, and its folder synced after the rename
    assert calls[:2] == [("fsync", inode), ("replace", inode)]
    assert calls[2] == ("fsync", tmp_path.stat().st_ino)


def test_a_refused_rename_is_one_error_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("gpuscope.platform.files.os.replace", refuse)
    with (
        pytest.raises(OutputError, match=r"out\.json: cannot write: Permission denied"),
        atomic_output(tmp_path / "out.json") as tmp,
    ):
        tmp.write_text("data")
    monkeypatch.undo()
    assert _names(tmp_path) == []


def test_a_folder_that_cannot_be_made_is_an_output_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match=r"out\.json: cannot"), atomic_output(tmp_path / "file" / "out.json"):
        pytest.fail("the block must not run")


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    dest = tmp_path / "out.json"
    dest.write_text("old")
    dest.chmod(0o640)
    with atomic_output(dest) as tmp:
        tmp.write_text("new")
    assert dest.stat().st_mode & 0o777 == 0o640


@pytest.mark.usefixtures("umask_027")
def test_a_new_file_gets_the_mode_of_any_new_file(tmp_path: Path) -> None:
    with atomic_output(tmp_path / "out.json") as tmp:
        tmp.write_text("new")
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o640  # 0666 less the umask, not mkstemp's 0600


def test_a_symlink_is_followed_and_kept(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with atomic_output(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and target.read_text() == "new"


@needs_root_to_plant
def test_a_symlink_another_user_planted_in_a_sticky_folder_is_not_written_through(tmp_path: Path) -> None:
    # given a file of root's, and a link to it that nobody planted in a folder like /tmp
    target = tmp_path / "passwd"
    target.write_text("root's")
    folder = shared_folder(tmp_path)
    link = plant_link(folder / "trace.json", target)
    # when root writes an output there
    with (
        pytest.raises(PlantedLinkError, match=r"trace\.json: not following a symlink owned by another user"),
        atomic_output(link) as tmp,
    ):
        tmp.write_text("new")
    # then the file is untouched, the link is as it was, and nothing was left in the folder
    assert target.read_text() == "root's"
    assert link.is_symlink() and _names(folder) == ["trace.json"]


def test_ones_own_symlink_in_a_sticky_folder_is_followed(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = shared_folder(tmp_path) / "link.json"
    link.symlink_to(target)
    with atomic_output(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_named_pipe_is_written_in_place_or_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with atomic_output(fifo, special_in_place=True) as path:
        assert path == fifo  # a pipe has no content to replace: it is the stream
    with pytest.raises(UsageError, match="not a regular file"), atomic_output(fifo):
        pytest.fail("the block must not run")
    assert fifo.is_fifo()


def test_a_folder_is_refused_as_an_output(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a folder"), atomic_output(tmp_path, special_in_place=True):
        pytest.fail("the block must not run")


def test_a_database_a_process_has_open_is_not_replaced(tmp_path: Path) -> None:
    dest = tmp_path / "live.db"
    dest.write_text("recording")
    with pytest.raises(OutputBusyError, match="open by pid 4242"), atomic_output(dest, holders=lambda p: {4242}):
        pytest.fail("the block must not run")
    assert _names(tmp_path) == ["live.db"] and dest.read_text() == "recording"


def test_a_replaced_database_loses_its_old_side_files_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an old database with the -wal and -shm a crash left beside it
    dest = tmp_path / "out.db"
    dest.write_text("old")
    for side in ("-wal", "-shm", "-journal"):
        Path(f"{dest}{side}").write_text("old pages")
    seen_at_rename: list[list[str]] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        seen_at_rename.append(_names(tmp_path))
        real_replace(src, dst)

    monkeypatch.setattr("gpuscope.platform.files.os.replace", replace)
    nobody: Callable[[Path], set[int]] = lambda p: set()  # noqa: E731
    # when a new database replaces it
    with atomic_output(dest, holders=nobody) as tmp:
        tmp.write_text("new")
    # then the old side files were gone before the new file took the name (SQLite would replay them onto it)
    assert [n for n in seen_at_rename[0] if n.startswith("out.db-")] == []
    assert _names(tmp_path) == ["out.db"] and dest.read_text() == "new"


# -- temporaries left by killed runs ------------------------------------------------------------------


def test_the_temporary_is_named_after_this_process(tmp_path: Path) -> None:
    with atomic_output(tmp_path / "out.json") as tmp:
        assert tmp.name.startswith(f".out.json.{os.getpid()}.")
        tmp.write_text("x")


def test_a_temporary_a_killed_run_left_is_removed_by_the_next_and_a_live_runs_is_kept(
    tmp_path: Path, live_pid: int
) -> None:
    # given the temporaries (and a side file) of a run that was killed, and of one still writing
    dead = dead_pid()
    stale = [tmp_path / f".out.db.{dead}.0123abcd.tmp", tmp_path / f".out.db.{dead}.0123abcd.tmp-journal"]
    kept = [tmp_path / f".out.db.{live_pid}.89abcdef.tmp", tmp_path / f".other.db.{dead}.0123abcd.tmp"]
    for path in (*stale, *kept):
        path.write_text("half")
    # when the next run writes the same output
    with atomic_output(tmp_path / "out.db") as tmp:
        tmp.write_text("whole")
    # then only the dead run's files of that output are gone
    assert _names(tmp_path) == sorted(["out.db", *(p.name for p in kept)])


@needs_root_to_plant
def test_another_users_temporary_is_never_removed(tmp_path: Path) -> None:
    theirs = tmp_path / f".out.db.{dead_pid()}.0123abcd.tmp"
    theirs.write_text("half")
    os.chown(theirs, NOBODY, NOBODY)
    with atomic_output(tmp_path / "out.db") as tmp:
        tmp.write_text("whole")
    assert theirs.exists()


# -- refuse_same_file ---------------------------------------------------------------------------------


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "rec.db"
    path.parent.mkdir()
    path.write_text("recording")
    return path


def test_the_same_path_is_refused(source: Path) -> None:
    with pytest.raises(SameFileError, match="is also an input"):
        refuse_same_file(source, [source])


def test_a_relative_path_to_an_input_is_refused(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(source.parent.parent)
    with pytest.raises(SameFileError):
        refuse_same_file(Path("data") / ".." / "data" / "rec.db", [source])


def test_a_symlink_to_an_input_is_refused(tmp_path: Path, source: Path) -> None:
    (tmp_path / "link.db").symlink_to(source)
    with pytest.raises(SameFileError):
        refuse_same_file(tmp_path / "link.db", [source])


def test_a_path_through_a_symlinked_folder_is_refused(tmp_path: Path, source: Path) -> None:
    (tmp_path / "alias").symlink_to(source.parent)
    with pytest.raises(SameFileError):
        refuse_same_file(tmp_path / "alias" / "rec.db", [source])


def test_a_hard_link_to_an_input_is_refused(tmp_path: Path, source: Path) -> None:
    (tmp_path / "hard.db").hardlink_to(source)
    with pytest.raises(SameFileError):
        refuse_same_file(tmp_path / "hard.db", [source])


@pytest.mark.parametrize("exists", [True, False], ids=["present", "not yet made"])
@pytest.mark.parametrize("side", ["-wal", "-shm", "-journal"])
def test_an_inputs_sqlite_side_file_is_refused(source: Path, side: str, exists: bool) -> None:
    if exists:
        Path(f"{source}{side}").write_text("pages")
    with pytest.raises(SameFileError, match=f"the {side} side file of"):
        refuse_same_file(f"{source}{side}", [source])


def test_another_file_is_accepted_even_with_the_same_content(tmp_path: Path, source: Path) -> None:
    (tmp_path / "copy.db").write_text("recording")
    refuse_same_file(tmp_path / "copy.db", [source])
    refuse_same_file(tmp_path / "new.db", [source])
    refuse_same_file(tmp_path / "data" / "rec.db.json", [source])
