"""A reader that stops early (``| head -1``): gpuscope stops quietly with 141, as ``git log | head`` does."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.cli import EXIT_BROKEN_PIPE, main
from tests.unit.query.builder import build_db


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 40,000 events: every format below writes megabytes, far more than a pipe buffers
    return build_db(tmp_path_factory.mktemp("pipe") / "big.db", n=20_000)


def _into_head(argv: list[str]) -> tuple[int, str, bytes]:
    """Run gpuscope into ``head -1`` through a real pipe; its status and stderr, and what head printed."""
    gpuscope = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    head = subprocess.Popen(["head", "-1"], stdin=gpuscope.stdout, stdout=subprocess.PIPE)
    assert gpuscope.stdout is not None
    gpuscope.stdout.close()  # head alone holds the read end: when it exits, the pipe closes
    first, _ = head.communicate(timeout=120)
    _, err = gpuscope.communicate(timeout=120)
    return gpuscope.returncode, err.decode(), first


@pytest.mark.parametrize(
    "argv",
    [
        ["query", "--csv", "SELECT * FROM events"],
        ["query", "--json", "SELECT * FROM events"],
        ["query", "--table", "SELECT * FROM events"],
        ["export", "-o", "-"],
    ],
    ids=["query-csv", "query-json", "query-table", "export"],
)
def test_a_closed_pipe_ends_the_command_with_141_and_nothing_on_stderr(big_db: Path, argv: list[str]) -> None:
    status, err, first = _into_head([*argv, "--db", str(big_db)])
    assert (status, err) == (EXIT_BROKEN_PIPE, "")
    assert first.strip()


def test_help_into_a_closed_pipe_is_quiet() -> None:
    status, err, first = _into_head(["query", "--help"])
    assert err == "" and status in (0, EXIT_BROKEN_PIPE)
    assert first.startswith(b"usage: gpuscope query")


class _ClosedPipe:
    """A stdout whose reader has gone: every write fails as a closed pipe does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no file descriptor in process")


def test_any_command_that_meets_a_closed_pipe_exits_141_without_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["version"]) == EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""
