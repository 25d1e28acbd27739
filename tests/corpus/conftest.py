"""The corpus of one test run: the valid recordings and every case's bad file, built once, in folders any user reaches.

pytest's own temporary folders are private to the user running the tests;
the cases run as the user nobody must reach theirs, so the corpus lives in a
folder of the run's temporary directory that everyone may enter, removed at
the end of the session.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.corpus.cases import CASES, Case, Isolation
from tests.corpus.commands import COMMANDS, Command, Run, folder_state, run_as_nobody, run_subprocess
from tests.corpus.recordings import Sources, build_sources
from tests.other_user import NOBODY


@dataclass
class Corpus:
    root: Path
    sources: Sources
    files: dict[str, Path] = field(default_factory=dict)

    def file(self, case: Case) -> Path:
        """The bad file of ``case``, made on first use in a folder of its own."""
        if case.name not in self.files:
            folder = self.root / "cases" / case.name
            folder.mkdir(parents=True, exist_ok=True)
            self.files[case.name] = case.make(folder, self.sources)
        return self.files[case.name]

    def folder(self, case: Case) -> Path:
        return self.root / "cases" / case.name

    def state(self, case: Case) -> dict[str, dict[str, str]]:
        """What lies in the case's folder and in the valid recordings' folder (which ``diff`` reads too)."""
        return {"case": folder_state(self.folder(case)), "sources": folder_state(self.sources.steady.parent)}

    def output_folder(self, case: Case, command: Command, owner: int | None = None) -> Path:
        """An empty folder for the run's output (owned by ``owner`` when given)."""
        out = self.root / "out" / case.name / command.name
        out.mkdir(parents=True)
        if owner is not None:
            os.chown(out, owner, owner)
        return out


@pytest.fixture(scope="session")
def corpus() -> Iterator[Corpus]:
    root = Path(tempfile.mkdtemp(prefix="gpuscope-corpus-"))
    root.chmod(0o755)
    try:
        yield Corpus(root, build_sources(root / "sources"))
    finally:
        for sub in (root, *root.rglob("*")):
            if sub.is_dir() and not sub.is_symlink():
                sub.chmod(0o755)
        shutil.rmtree(root)


@dataclass(frozen=True)
class IsolatedRun:
    run: Run
    out: Path
    before: dict[str, dict[str, str]]
    after: dict[str, dict[str, str]]


class IsolatedRuns:
    """The runs of the isolated cases, made together on first use: subprocesses side by side, each with a time limit."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.results: dict[tuple[str, str], IsolatedRun] = {}

    def get(self, case: Case, command: Command) -> IsolatedRun:
        if not self.results:
            self._run_all()
        return self.results[(case.name, command.name)]

    def _run_all(self) -> None:
        cases = [c for c in CASES if c.isolation != Isolation.IN_PROCESS]
        before = {c.name: (self.corpus.file(c), self.corpus.state(c)) for c in cases}
        jobs: list[tuple[Case, Command, Path, Callable[[], Run]]] = []
        for case in cases:
            for command in COMMANDS:
                nobody = case.isolation == Isolation.NOBODY
                out = self.corpus.output_folder(case, command, NOBODY if nobody else None)
                argv = command.argv(before[case.name][0], self.corpus.sources.steady, out)
                if nobody:
                    home = self.corpus.root / "homes" / f"{case.name}-{command.name}"
                    env = self._env(case)
                    jobs.append((case, command, out, functools.partial(run_as_nobody, argv, home, env)))
                else:
                    jobs.append((case, command, out, functools.partial(run_subprocess, argv)))
        workers = min(4, (os.cpu_count() or 1) + 1)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            runs = list(pool.map(lambda job: job[3](), jobs))
        for (case, command, out, _), run in zip(jobs, runs, strict=True):
            self.results[(case.name, command.name)] = IsolatedRun(
                run, out, before[case.name][1], self.corpus.state(case)
            )

    def _env(self, case: Case) -> dict[str, str | None]:
        """What a run as nobody changes in its environment (None: unset): a home, cache and TMPDIR of its own, or
        ones it may not write (``case.home``)."""
        base = self.corpus.root / "homes" / case.name
        own, theirs = base / "own", base / "root-owned"
        for folder in (own, own / "tmp", theirs):
            folder.mkdir(parents=True, exist_ok=True)
        for folder in (own, own / "tmp"):
            os.chown(folder, NOBODY, NOBODY)
        if case.home == "unwritable":
            return {"HOME": str(theirs), "XDG_CACHE_HOME": None, "TMPDIR": str(own / "tmp")}
        return {"HOME": str(own), "XDG_CACHE_HOME": str(own / "cache"), "TMPDIR": str(own / "tmp")}


@pytest.fixture(scope="session")
def isolated_runs(corpus: Corpus) -> IsolatedRuns:
    return IsolatedRuns(corpus)
