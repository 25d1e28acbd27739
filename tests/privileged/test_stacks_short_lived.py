"""Python frames of a process that exits before user space reads its first stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.privileged.support import json_line

SHORT_PY = Path(__file__).resolve().parent.parent / "workloads" / "stack_short_py.py"


def _python_frames(frames: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(f.get("function"), f.get("file"), f.get("line")) for f in frames if f["kind"] == "python"]


def test_every_call_of_a_python_process_that_exits_at_once_names_its_function_line_and_callers(trace_command, standin):
    # given a Python script making 50 cudaMalloc calls through ctypes from
    # nested functions, which exits right after the last call
    # when it is traced with Python stacks (the default)
    run = trace_command([sys.executable, str(SHORT_PY), str(standin.cudart), "50"])

    # then every call's stack shows the inner function at its executing line,
    # then its callers in order, with no unreadable code objects
    assert run.returncode == 0, run.stderr
    expected = json_line(run.stdout)
    want = [(name, expected["file"], line) for name, line in expected["levels"]]
    rows = run.query("SELECT ts_ns, frames FROM event_call_stacks WHERE op = 'cudaMalloc' ORDER BY ts_ns")
    assert len(rows) == 50, rows
    wrong = []
    for i, (_, frames_json) in enumerate(rows):
        frames = json.loads(str(frames_json))
        py = _python_frames(frames)
        unreadable = [f for f in frames if "unreadable" in str(f.get("marker", ""))]
        if unreadable or py[:3] != want or len(py) < 4 or py[3][0] != "<module>":
            wrong.append((i, frames))
    assert not wrong, (f"{len(wrong)} of 50 calls", wrong[:2])


def test_the_first_call_of_a_new_stack_has_its_frames_in_call_order(trace_command, standin):
    # given the same script making a single call, so its only stack is a first one
    run = trace_command([sys.executable, str(SHORT_PY), str(standin.cudart), "1"])

    # then the stack reads innermost first: the probed function, the native
    # frames into the interpreter, then allocate <- layer <- run <- <module>
    assert run.returncode == 0, run.stderr
    expected = json_line(run.stdout)
    ((frames_json,),) = run.query("SELECT frames FROM event_call_stacks WHERE op = 'cudaMalloc'")
    frames = json.loads(str(frames_json))
    assert frames[0]["function"] == "cudaMalloc", frames
    kinds = [f["kind"] for f in frames]
    first_py = kinds.index("python")
    # native frames (the library, libffi, _ctypes) before Python ones, never after them inside the Python run
    assert all(k == "native" for k in kinds[:first_py]), frames
    names = [f[0] for f in _python_frames(frames)]
    assert names == [*(n for n, _ in expected["levels"]), "<module>"], frames


def _static_python() -> str:
    """An interpreter with its runtime in the executable (registered by file): this one, or the system's."""
    from gpuscope.stacks.python import python_executable

    for candidate in (sys.executable, "/usr/bin/python3"):
        if python_executable(os.path.realpath(candidate)) is not None:
            return candidate
    pytest.fail("no Python with its runtime in the executable here (Debian's python3 is one: apt-get install python3)")
    raise AssertionError


@contextmanager
def _cpu_hogs(n: int) -> Iterator[None]:
    """``n`` busy loops beside the test: the agent gets its CPU only when the scheduler says so."""
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def test_a_short_lived_python_beside_cpu_hogs_has_its_frames_from_its_first_call(trace_command, standin):
    # given a machine whose CPUs are all busy, and a Python process that makes one call and exits: user
    # space may read its maps only after it is gone, so its frames come from its executable's registration
    python = _static_python()
    with _cpu_hogs(os.cpu_count() or 2):
        runs = [trace_command([python, str(SHORT_PY), str(standin.cudart), "1"]) for _ in range(3)]
    # then every run's call has its Python frames, innermost first, down to <module>
    for run in runs:
        assert run.returncode == 0, run.stderr
        expected = json_line(run.stdout)
        ((frames_json,),) = run.query("SELECT frames FROM event_call_stacks WHERE op = 'cudaMalloc'")
        names = [f[0] for f in _python_frames(json.loads(str(frames_json)))]
        assert names == [*(n for n, _ in expected["levels"]), "<module>"], frames_json
