"""Processes in another mount namespace (a container): their own library files are the ones traced.

A container may hold a file at a path where the host has another, or none.
The test gives a process its own mount namespace (``unshare --mount``) in
which a libcudart is bind-mounted over a path where the host holds a
different library, so tracing the host's file records nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import StandinLibs, TraceRun, run_gpuscope
from tests.privileged.support import LineReader, background
from tests.privileged.test_late_loads import calls, compile_c, library_paths, pids_of

CALLS = 2000


def _views(standin: StandinLibs, tmp_path: Path) -> tuple[Path, Path]:
    """(the path both see, the container's file): the host's file there is libnccl under libcudart's name."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is installed by `make setup`")
    shared = tmp_path / "view" / "libcudart.so.12"
    shared.parent.mkdir(parents=True)
    shutil.copy2(standin.nccl, shared)  # the host's file at that path: a library without cudaLaunchKernel
    own = tmp_path / "container" / "libcudart.so.12"
    own.parent.mkdir(parents=True)
    shutil.copy2(standin.cudart, own)
    return shared, own


def _in_own_namespace(shared: Path, own: Path, command: str) -> list[str]:
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f"mount --bind {own} {shared} && exec {command}",
    ]


def test_a_library_a_container_loads_late_is_its_own_file_not_the_hosts_at_that_path(
    standin: StandinLibs, tmp_path: Path
) -> None:
    # given a process in its own mount namespace that dlopens the path where its own libcudart is mounted
    shared, own = _views(standin, tmp_path)
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    # when it is traced from the start and makes its calls at once
    db = tmp_path / "late.db"
    p = run_gpuscope(
        "trace", "--no-tui", "--record-all", "--db", str(db), "--",
        *_in_own_namespace(shared, own, f"{exe} {shared} {CALLS}"), timeout=120,
    )  # fmt: skip
    run = TraceRun(db, p.returncode, p.stdout, p.stderr)
    assert run.returncode == 0, run.stderr
    # then every call is recorded, through the process's own root
    (pid,) = pids_of(run.stdout)
    assert calls(run, pid, "cudaLaunchKernel") == CALLS
    assert any(path.startswith("/proc/") and path.endswith(f"/root{shared}") for path in library_paths(run))


def test_attaching_to_a_running_container_process_traces_the_file_it_mapped(
    standin: StandinLibs, tmp_path: Path
) -> None:
    # given a process in its own mount namespace that has loaded its own libcudart and keeps calling it
    shared, own = _views(standin, tmp_path)
    exe = compile_c("dlopen_calls.c", tmp_path / "dlopen_calls", "-ldl")
    with background(_in_own_namespace(shared, own, f"{exe} {shared} 1 30"), stdout=subprocess.PIPE) as proc:
        out = LineReader(proc.stdout)
        out.wait_for(lambda line: line.startswith("calls "), timeout=30)
        (pid,) = pids_of("".join(out.lines))
        # when it is traced by pid (its libraries found in its memory map)
        db = tmp_path / "pid.db"
        p = run_gpuscope("trace", "--pid", str(pid), "--duration", "1s", "--db", str(db), timeout=60)
        run = TraceRun(db, p.returncode, p.stdout, p.stderr)
    # then the library attached is the one it mapped, reached through its root
    assert run.returncode == 0, run.stderr
    assert any(path.startswith(f"/proc/{pid}/root") for path in library_paths(run)), library_paths(run)
