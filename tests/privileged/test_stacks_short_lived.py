"""Python frames of a process that exits before user space reads its first stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.privileged.support import json_line

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
SHORT_PY = WORKLOADS / "stack_short_py.py"
FORK_PY = WORKLOADS / "stack_fork_py.py"


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
    from gpuscope.stacks.python_files import python_executable

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
    # then every run's call has its Python frames, innermost first, down to <module>
    _one_call_beside_hogs_has_its_frames(trace_command, standin, _static_python())


def _one_call_beside_hogs_has_its_frames(trace_command, standin, python: str) -> None:
    """Three runs of ``python`` making one call and exiting, beside a busy loop per CPU: each call's stack has
    its Python frames, innermost first, down to <module>."""
    with _cpu_hogs(os.cpu_count() or 2):
        runs = [trace_command([python, str(SHORT_PY), str(standin.cudart), "1"]) for _ in range(3)]
    for run in runs:
        assert run.returncode == 0, run.stderr
        expected = json_line(run.stdout)
        ((frames_json,),) = run.query("SELECT frames FROM event_call_stacks WHERE op = 'cudaMalloc'")
        names = [f[0] for f in _python_frames(json.loads(str(frames_json)))]
        assert names == [*(n for n, _ in expected["levels"]), "<module>"], frames_json


@pytest.fixture(scope="module")
def shared_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A python3 with its runtime in the system's libpython3.X.so (as Fedora's and pyenv's shared builds):
    built here, so its library is registered by the probe on the library's start, not by its executable."""
    probe = "import sysconfig as s; print(s.get_config_var('LIBDIR'), s.get_config_var('INSTSONAME'))"
    libdir, soname = subprocess.run(
        ["/usr/bin/python3", "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    if not (Path(libdir) / soname).is_file():
        pytest.fail(f"no {soname} in {libdir}: apt-get install libpython3-dev (make setup installs it)")
    exe = tmp_path_factory.mktemp("shared-python") / "python3-shared"
    subprocess.run(
        ["cc", "-O1", "-fno-omit-frame-pointer", "-o", str(exe), str(WORKLOADS / "python_shared.c"), f"-L{libdir}",
         f"-l:{soname}"],
        check=True,
    )  # fmt: skip
    from gpuscope.stacks.python_files import libpython_of, python_executable

    assert python_executable(str(exe)) is None and libpython_of(str(exe)) == os.path.realpath(Path(libdir) / soname)
    return str(exe)


def test_a_short_lived_libpython_build_beside_cpu_hogs_has_its_frames_from_its_first_call(
    trace_command, standin, shared_python
):
    # given a busy machine and a Python whose runtime is in libpython, mapped wherever ld.so puts it, that
    # makes one call and exits: user space may read its maps only after it is gone
    # then every run's call has its Python frames, innermost first, down to <module>
    _one_call_beside_hogs_has_its_frames(trace_command, standin, shared_python)


@pytest.mark.parametrize("build", ["static", "libpython"])
def test_forked_children_that_call_at_once_have_their_python_frames(trace_command, standin, shared_python, build):
    # given a Python that forks 5 children, each making one call at once and exiting, beside busy loops
    python = _static_python() if build == "static" else shared_python
    with _cpu_hogs(os.cpu_count() or 2):
        run = trace_command([python, str(FORK_PY), str(standin.cudart), "5"])
    # then every child's call names its function, line and callers (the child has its parent's runtime)
    assert run.returncode == 0, run.stderr
    expected = json_line(run.stdout)
    want = [(name, expected["file"], line) for name, line in expected["levels"]]
    rows = run.query("SELECT pid, frames FROM event_call_stacks WHERE op = 'cudaMalloc' ORDER BY ts_ns")
    assert len({pid for pid, _ in rows}) == 5, rows
    for _, frames_json in rows:
        assert _python_frames(json.loads(str(frames_json)))[:3] == want, frames_json


def _wait_until(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_the_kernel_forgets_a_python_process_at_its_exec_and_at_its_exit_and_children_inherit_it_at_a_fork():
    # given a tracer, and a traced Python process registered for Python walks
    from gpuscope.agent.options import TraceOptions
    from gpuscope.agent.tracer import Tracer

    script = (
        "import os, sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\npid = os.fork()\nif pid == 0:\n"
        "    time.sleep(3)\n    os._exit(0)\nos.waitpid(pid, 0)\nsys.stdin.readline()\n"
        "os.execv('/bin/sleep', ['sleep', '30'])\n"
    )
    tracer = Tracer(TraceOptions(filter_targets=True))
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        # registered once it runs Python: Popen returns when the exec has replaced its memory, a moment before the
        # kernel's exec hook (which forgets the program it replaced) has run
        assert proc.stdout.readline().strip() == "ready"
        tracer.add_target(proc.pid)
        tracer.set_python_process(proc.pid, runtime=0x7F00_0000_1000, version=1)
        assert proc.pid in tracer.python_processes()
        # when it forks, the child has its runtime from the fork on
        proc.stdin.write("fork\n")
        proc.stdin.flush()
        assert _wait_until(lambda: len(tracer.python_processes()) == 2), tracer.python_processes()
        (child,) = set(tracer.python_processes()) - {proc.pid}
        # and when the child exits it is forgotten (its pid may be reused by any program)
        assert _wait_until(lambda: child not in tracer.python_processes()), tracer.python_processes()
        # and when the parent execs another program, its runtime is forgotten while it still runs
        proc.stdin.write("exec\n")
        proc.stdin.flush()
        assert _wait_until(lambda: proc.pid not in tracer.python_processes()), tracer.python_processes()
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
        tracer.detach()
        tracer.close()
