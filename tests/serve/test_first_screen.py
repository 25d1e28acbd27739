"""The server computes the page's first screen ahead, and announces itself once that is done (or a bound passed)."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.serve.support import contention_recording


def test_when_the_head_start_says_it_is_done_the_first_screen_reads_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuscope.serve.http_api as api_module
    import gpuscope.serve.time_views as views_module
    from gpuscope.serve.http_api import PAGE_SESSIONS, Api

    api = Api(contention_recording(tmp_path / "run.db"))
    done = threading.Event()
    # when the head start is run and says it is done
    api.warm(done)
    assert done.wait(60)
    reads: list[str] = []

    def refused(*args: Any, **kwargs: Any) -> Any:
        reads.append("read")
        raise AssertionError("the first screen read the recording again")

    monkeypatch.setattr(views_module, "load_frame", refused)
    monkeypatch.setattr(api_module, "explain_db", refused)
    # then the page's first screen (the last run's report, its timeline, its lanes at any width), asked as the
    # page asks, is all computed
    overview = api.overview(sessions=PAGE_SESSIONS)
    api.timeline(sessions=PAGE_SESSIONS)
    lanes = api.lanes(width=300, sessions=PAGE_SESSIONS)
    assert reads == []
    assert overview["finding_counts"] and lanes["lanes"]


def test_a_recording_that_cannot_be_read_says_done_at_once(tmp_path: Path) -> None:
    from gpuscope.serve.http_api import Api

    db = contention_recording(tmp_path / "run.db")
    api = Api(db)
    db.unlink()
    done = threading.Event()
    api.warm(done)
    # the requests report the error; the start line does not wait for a head start that will never come
    assert done.is_set()


@pytest.mark.parametrize("ready_after", [None, 0.3])
def test_the_start_line_waits_for_the_first_screen_at_most_its_bound(
    ready_after: float | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuscope.commands.dashboard as command
    import gpuscope.serve.app as app_module
    import gpuscope.serve.server as server_module
    from gpuscope.cli import build_parser

    # given a first screen that takes 0.3 s, or never comes, and a 1 s bound
    monkeypatch.setattr(command, "FIRST_SCREEN_WAIT_S", 1.0)

    def app(db: Path, guard: Any, *, first_screen: threading.Event, **kwargs: Any) -> object:
        if ready_after is not None:
            threading.Timer(ready_after, first_screen.set).start()
        return object()

    out = io.StringIO()
    printed = threading.Event()
    started: list[float] = []

    def serve(app: object, listener: Any, *, verbose: int, on_ready: Any) -> None:
        started.append(time.monotonic())
        on_ready()  # the server has started: the line comes once the first screen is ready
        assert printed.wait(10)

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            out.write(text)
            if "\n" in text:
                printed.set()
            return len(text)

    monkeypatch.setattr(app_module, "create_app", app)
    monkeypatch.setattr(server_module, "serve", serve)
    monkeypatch.setattr("sys.stdout", Out())
    db = contention_recording(tmp_path / "run.db")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    args = build_parser().parse_args(["dashboard", "--db", str(db), "--addr", "127.0.0.1:0", "--json"])
    # when the command runs
    assert command.run(args) == 0
    waited = time.monotonic() - started[0]
    # then its JSON start line came once the first screen was ready, or at the bound
    assert '"url"' in out.getvalue()
    if ready_after is None:
        assert 1.0 <= waited < 3.0, waited
    else:
        assert ready_after <= waited < 1.0, waited
