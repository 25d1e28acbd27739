"""Every command that reads a recording, how the corpus runs it, and what any run of it must show.

A run either succeeds (exit 0, with a result that is checked: valid JSON,
a readable output file) or fails with a documented exit code (1, 2 or 3),
one ``error:`` line and a ``fix:`` line under it, never an internal error or
a traceback. Either way the file it read is unchanged, nothing new lies
beside it, and a failed run leaves no output behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuscope import cli
from gpuscope.store.connect import connect_reader
from tests.other_user import as_nobody

RUN_TIMEOUT_S = 60  # generous on a loaded 2-CPU runner: a run of these small files takes well under a second
DOCUMENTED_FAILURES = (1, 2, 3)


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Command:
    name: str
    argv: Callable[[Path, Path, Path], list[str]]
    """(the bad file, a valid recording, the run's own output folder) -> the command line."""
    output: str | None = None
    """The name the command writes in the output folder (None: it writes nothing)."""
    check: Callable[[Run, Path | None], None] = lambda run, out: None
    """Assert that a successful run's result is correct (its stdout, and its output when it writes one)."""
    reference_only: bool = False
    """Reads only reference-system files (``import``): a gpuscope recording must be refused."""
    may_write_nothing: Callable[[Run], bool] = lambda run: False
    """Whether a successful run may leave no output (an export of no events)."""


def _printed_something(run: Run, out: Path | None) -> None:
    assert run.stdout.strip(), "exit 0 with nothing on stdout"


def _json_rows(run: Run, out: Path | None) -> None:
    assert isinstance(json.loads(run.stdout), list), run.stdout


def _json_count(run: Run, out: Path | None) -> None:
    rows = json.loads(run.stdout)
    assert isinstance(rows, list) and len(rows) == 1 and isinstance(rows[0]["n"], int), run.stdout


def _perfetto(run: Run, out: Path | None) -> None:
    assert out is not None
    doc = json.loads(out.read_text())
    assert isinstance(doc["traceEvents"], list)


def _parquet(run: Run, out: Path | None) -> None:
    import pyarrow.parquet as pq

    assert out is not None
    if not out.exists():
        return  # no events: no file (may_write_nothing)
    for part in out.rglob("*.parquet"):
        assert pq.read_table(part).num_rows >= 0


def _recording(run: Run, out: Path | None) -> None:
    assert out is not None
    conn = connect_reader(out)
    try:
        assert conn.execute("SELECT count(*) FROM event_log").fetchone()[0] >= 0
    finally:
        conn.close()


COMMANDS = [
    Command("explain", lambda bad, good, out: ["explain", "--db", str(bad)], check=_printed_something),
    Command(
        "query",
        lambda bad, good, out: ["query", "--db", str(bad), "--json", "SELECT count(*) AS n FROM events"],
        check=_json_count,
    ),
    Command(
        "export-perfetto",
        lambda bad, good, out: ["export", "--db", str(bad), "-o", str(out / "trace.json")],
        "trace.json",
        _perfetto,
    ),
    Command(
        "export-parquet",
        lambda bad, good, out: ["export", "--format", "parquet", "--db", str(bad), "-o", str(out / "parquet")],
        "parquet",
        _parquet,
        may_write_nothing=lambda run: "wrote 0 events " in run.stdout + run.stderr,
    ),
    Command("stacks", lambda bad, good, out: ["stacks", "--db", str(bad), "--json"], check=_json_rows),
    Command("diff-as-a", lambda bad, good, out: ["diff", str(bad), str(good)], check=_printed_something),
    Command("diff-as-b", lambda bad, good, out: ["diff", str(good), str(bad)], check=_printed_something),
    Command("merge", lambda bad, good, out: ["merge", str(bad), "-o", str(out / "merged.db")], "merged.db", _recording),
    Command(
        "import",
        lambda bad, good, out: ["import", str(bad), "-o", str(out / "imported.db")],
        "imported.db",
        _recording,
        reference_only=True,
    ),
]


# -- running ------------------------------------------------------------------------------------------


def run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Run:
    """Run ``gpuscope ARGV`` through ``cli.main`` in a thread of this process, waiting at most RUN_TIMEOUT_S.

    A run past the limit fails the test ("hung"); its thread is left behind
    (nothing can stop a thread inside SQLite), so the other tests still run.
    """
    capsys.readouterr()
    result: list[int] = []

    def main() -> None:
        try:
            result.append(cli.main(argv))
        except SystemExit as exc:  # argparse's own refusals
            result.append(exc.code if isinstance(exc.code, int) else 2)

    worker = threading.Thread(target=main, name="gpuscope " + " ".join(argv[:1]), daemon=True)
    worker.start()
    worker.join(RUN_TIMEOUT_S)
    out, err = capsys.readouterr()
    if worker.is_alive():
        return Run(-1, out, f"hung: no answer after {RUN_TIMEOUT_S} s")
    assert result, f"cli.main raised instead of returning a status\nstderr: {err}"
    return Run(result[0], out, err)


def run_subprocess(argv: list[str], *, prefix: list[str] | None = None, env: dict[str, str] | None = None) -> Run:
    """Run ``gpuscope ARGV`` in a new interpreter (behind ``prefix``, e.g. setpriv), killed after RUN_TIMEOUT_S."""
    try:
        p = subprocess.run(
            [*(prefix or []), sys.executable, "-m", "gpuscope", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return Run(-1, str(exc.stdout or ""), f"hung: no answer after {RUN_TIMEOUT_S} s")
    return Run(p.returncode, p.stdout, p.stderr)


# Sets the environment a run as nobody needs (as_nobody gives it its own home), then runs the command line.
_WITH_ENV = (
    "import json, os, sys; "
    "[os.environ.pop(k, None) if v is None else os.environ.update({k: v}) for k, v in json.loads(sys.argv[1]).items()]; "
    "from gpuscope.cli import run; sys.argv = ['gpuscope', *sys.argv[2:]]; run()"
)


def run_as_nobody(argv: list[str], home: Path, env: dict[str, str | None]) -> Run:
    """Run ``gpuscope ARGV`` as the user nobody (``tests.other_user``) with ``env`` applied (None: unset)."""
    try:
        p = as_nobody([sys.executable, "-c", _WITH_ENV, json.dumps(env), *argv], home)
    except subprocess.TimeoutExpired:
        return Run(-1, "", "hung: no answer in time")
    return Run(p.returncode, p.stdout, p.stderr)


# -- what every run must show -------------------------------------------------------------------------


def folder_state(folder: Path) -> dict[str, str]:
    """What lies in ``folder``: each entry's kind and, for a regular file, its content's digest (nothing is opened
    that could block: FIFOs and links are described by their kind and target)."""
    state = {}
    for entry in sorted(os.listdir(folder)):
        path = folder / entry
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            state[entry] = f"link -> {os.readlink(path)}"
        elif stat.S_ISREG(st.st_mode):
            state[entry] = f"file {st.st_mode & 0o7777:o} " + hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISDIR(st.st_mode):
            state[entry] = f"folder {sorted(os.listdir(path))}"
        else:
            state[entry] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return state


def assert_clean_outcome(run: Run, command: Command, out: Path, *, must_refuse: bool, must_read: bool) -> None:
    """The run ended with a documented exit code and one clear error, or succeeded with a correct result."""
    shown = f"exit {run.returncode}\nstdout: {run.stdout[-2000:]}\nstderr: {run.stderr[-2000:]}"
    assert "Traceback" not in run.stderr + run.stdout, shown
    assert "internal error" not in run.stderr, shown
    written = sorted(os.listdir(out))
    if run.returncode == 0:
        assert not must_refuse, f"a bad file was accepted\n{shown}"
        expected = [command.output] if command.output and not (command.may_write_nothing(run) and not written) else []
        assert written == expected, f"output folder holds {written}, expected {expected}\n{shown}"
        command.check(run, out / command.output if command.output else None)
        return
    assert not must_read, f"a readable file was refused\n{shown}"
    assert run.returncode in DOCUMENTED_FAILURES, shown
    lines = run.stderr.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(errors) == 1, f"expected one error line\n{shown}"
    at = errors[0]
    assert at + 1 < len(lines) and lines[at + 1].startswith("  fix: "), f"no fix line under the error\n{shown}"
    assert written == [], f"a failed run left {written} behind\n{shown}"
