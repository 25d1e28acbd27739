"""Time windows far outside any recording: an empty window or a clear refusal, never an overflow.

A recording's times are 64-bit nanoseconds; an offset of 100,000 days from
a wall-clock start, or the year 9999, is past what they hold.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.commands import run_in_process as run
from tests.corpus.conftest import Corpus

WINDOWS = [
    ["--from", "100000d"],
    ["--from", "106751d", "--to", "106751d"],
    ["--since", "106751d"],
    ["--from", "end-106751d"],
    ["--from", "9999-12-31T23:59:59-14:00"],
    ["--to", "0001-01-01T00:00:00+14:00"],
    ["--from", "@9223372036"],
]


@pytest.mark.parametrize("window", WINDOWS, ids=[" ".join(w) for w in WINDOWS])
@pytest.mark.parametrize("recording", ["steady", "ingero"])
def test_a_window_far_outside_the_recording_is_empty_or_refused_in_every_command(
    corpus: Corpus, capsys: pytest.CaptureFixture[str], tmp_path: Path, window: list[str], recording: str
) -> None:
    db = str(getattr(corpus.sources, recording))
    for argv in (
        ["explain", "--db", db, *window],
        ["query", "--db", db, *window, "SELECT count(*) FROM events"],
        ["export", "--db", db, *window, "-o", str(tmp_path / "trace.json")],
        ["diff", db, db, *window],
    ):
        result = run(argv, capsys)
        assert result.returncode in (0, 2), f"{argv}\n{result.stderr}"
        assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
        if result.returncode == 2:
            assert "\n  fix: " in result.stderr, result.stderr
