"""Every bad file through every command that reads a recording: a clear answer, in time, and the file left as it was.

Runs in this process (``cli.main``) where reading cannot block; FIFOs,
devices and runs as another user go through subprocesses with a time limit,
several at once.
"""

from __future__ import annotations

import pytest

from tests.corpus.cases import CASES, Case, Isolation
from tests.corpus.commands import COMMANDS, Command, assert_clean_outcome, run_in_process
from tests.corpus.conftest import Corpus, IsolatedRuns

IN_PROCESS = [(case, command) for case in CASES if case.isolation == Isolation.IN_PROCESS for command in COMMANDS]
ISOLATED = [(case, command) for case in CASES if case.isolation != Isolation.IN_PROCESS for command in COMMANDS]


def _params(pairs: list[tuple[Case, Command]]) -> list[object]:
    """Each (case, command), named."""
    return [pytest.param(case, command, id=f"{case.name}-{command.name}") for case, command in pairs]


def _must_read(case: Case, command: Command) -> bool:
    """A file the command must read: ``import`` converts only reference-system files."""
    return case.must_read and (case.reference or not command.reference_only)


def _must_refuse(case: Case, command: Command) -> bool:
    return case.must_refuse or (command.reference_only and not case.reference)


def test_the_corpus_has_one_file_per_case_name() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(("case", "command"), _params(IN_PROCESS))
def test_a_bad_file_gets_a_clear_answer_and_is_left_unchanged(
    case: Case, command: Command, corpus: Corpus, capsys: pytest.CaptureFixture[str]
) -> None:
    # given the bad file, and an empty folder for what the command writes
    bad = corpus.file(case)
    out = corpus.output_folder(case, command)
    before = corpus.state(case)
    # when
    run = run_in_process(command.argv(bad, corpus.sources.steady, out), capsys)
    # then
    assert_clean_outcome(
        run, command, out, must_refuse=_must_refuse(case, command), must_read=_must_read(case, command)
    )
    assert corpus.state(case) == before


@pytest.mark.parametrize(("case", "command"), _params(ISOLATED))
def test_a_file_that_could_block_or_may_not_be_read_gets_a_clear_answer_in_time(
    case: Case, command: Command, isolated_runs: IsolatedRuns
) -> None:
    result = isolated_runs.get(case, command)
    assert_clean_outcome(
        result.run, command, result.out, must_refuse=_must_refuse(case, command), must_read=_must_read(case, command)
    )
    assert result.after == result.before
