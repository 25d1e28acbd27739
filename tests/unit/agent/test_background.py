"""A slow call on a thread: its value or its exception reaches the caller."""

from __future__ import annotations

import threading

import pytest

from gpuscope.agent.background import Background


def test_result_returns_what_the_call_returned() -> None:
    assert Background(lambda: 42, name="t").result() == 42


def test_result_raises_what_the_call_raised_on_the_callers_thread() -> None:
    def fail() -> int:
        raise PermissionError("needs CAP_BPF")

    with pytest.raises(PermissionError, match="needs CAP_BPF"):
        Background(fail, name="t").result()


def test_the_call_runs_while_the_caller_goes_on() -> None:
    # given a call that cannot end before the caller lets it
    go = threading.Event()
    job = Background(lambda: go.wait(timeout=30), name="t")
    # then it has not ended, and a bounded wait says so
    assert not job.done()
    assert not job.wait(0.01)
    # when the caller lets it end
    go.set()
    # then
    assert job.result() is True
    assert job.done()
