"""Call stacks of CUDA calls: native frames with and without frame pointers, Python lines on every CPython."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.privileged.support import json_line

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
PY_WORKLOAD = WORKLOADS / "stack_py.py"
PYENV = Path("/root/.pyenv/versions")


def _stacks(run, op: str) -> list[list[dict[str, object]]]:
    rows = run.query("SELECT DISTINCT frames FROM event_call_stacks WHERE op = ?", (op,))
    return [json.loads(str(r[0])) for r in rows]


def _native_names(frames: list[dict[str, object]]) -> list[str]:
    return [str(f.get("function")) for f in frames if f["kind"] == "native"]


def test_a_frame_pointer_build_names_every_call_level_even_after_the_process_exited(build_workload, trace_command):
    # given a C workload built with frame pointers, which exits right after its calls
    exe = build_workload("stack_levels.c")
    # when it is traced (stacks are on by default) and symbolized after it exited
    run = trace_command([str(exe), "5"])
    # then every cudaMalloc and cudaStreamSynchronize carries one stack naming every level
    assert run.returncode == 0, run.stderr
    assert run.query("SELECT count(*) FROM event_call_stacks WHERE op = 'cudaMalloc'") == [(5,)]
    for op in ("cudaMalloc", "cudaStreamSynchronize"):
        (frames,) = _stacks(run, op)
        names = _native_names(frames)
        assert names[:5] == [op, "stack_level3", "stack_level2", "stack_level1", "main"], frames
        assert frames[1]["module"] == str(exe)
    # and the call site is the workload's own function
    assert run.query("SELECT DISTINCT call_site FROM event_call_stacks WHERE op = 'cudaMalloc'") == [
        (f"stack_level3 ({exe.name})",)
    ]


def test_without_frame_pointers_stack_scanning_names_every_call_level(build_workload, trace_command):
    # given the same workload built without frame pointers
    exe = build_workload("stack_levels.c", extra_flags=["-fomit-frame-pointer"])
    # when it is traced
    run = trace_command([str(exe), "3"])
    # then the return address read at [sp] names the direct caller, and
    # scanning the copied stack window names every level above it
    assert run.returncode == 0, run.stderr
    for op in ("cudaMalloc", "cudaStreamSynchronize"):
        (frames,) = _stacks(run, op)
        assert _native_names(frames)[:5] == [op, "stack_level3", "stack_level2", "stack_level1", "main"], frames
        # and the frames found by scanning say so
        assert [f.get("marker") for f in frames[2:5]] == ["scanned"] * 3, frames
        assert frames[1].get("marker") is None, frames


def test_no_stack_records_no_stacks(build_workload, trace_command):
    exe = build_workload("stack_levels.c")
    run = trace_command([str(exe), "3"], extra=["--no-stack"])
    assert run.returncode == 0, run.stderr
    assert run.query("SELECT count(*) FROM event_stacks") == [(0,)]
    assert run.op_counts()["cudaMalloc"] == 3


def _pythons() -> list[Path]:
    found = sorted(PYENV.glob("3.1[0-9].*/bin/python3")) if PYENV.is_dir() else []
    return found or [Path("/usr/bin/python3")]


def _line_of(text: str, needle: str) -> int:
    for i, line in enumerate(PY_WORKLOAD.read_text().splitlines(), start=1):
        if needle in line and re.match(r"\s", line):
            return i
    raise AssertionError(needle)


@pytest.mark.parametrize("python", _pythons(), ids=lambda p: p.parent.parent.name)
def test_python_frames_name_the_exact_file_line_and_function_of_every_level(python, trace_command, standin):
    # given a Python program calling the stand-in libcudart through ctypes from
    # nested functions, a method of a class with a non-ASCII name, and a thread
    # when it is traced
    run = trace_command([str(python), str(PY_WORKLOAD), str(standin.cudart), "5"])
    # then
    assert run.returncode == 0, run.stderr
    sites = json_line(run.stdout)
    minor = int(python.parent.parent.name.split(".")[1]) if python.parent.parent.name[0].isdigit() else 11
    src = str(PY_WORKLOAD)
    alloc_file, alloc_line, _ = sites["alloc"][0]
    sync_file, sync_line, _ = sites["sync"][0]
    # 3.10 has no co_qualname: the method is named without its class
    sync_name = "Modèle.synchronisé" if minor >= 11 else "synchronisé"
    want = {
        "cudaMalloc": [
            ("allocate_kv_cache", alloc_file, alloc_line),
            ("middle", src, _line_of(src, "allocate_kv_cache(n)")),
            ("outer", src, _line_of(src, "middle(4096 + i)")),
        ],
        "cudaStreamSynchronize": [
            (sync_name, sync_file, sync_line),
            ("middle", src, _line_of(src, "Modèle().synchronisé()")),
            ("outer", src, _line_of(src, "middle(4096 + i)")),
        ],
    }
    for op, levels in want.items():
        stacks = [s for s in _stacks(run, op) if any(f["kind"] == "python" for f in s)]
        assert stacks, (op, _stacks(run, op))
        threads = 0
        for frames in stacks:
            py = [(f.get("function"), f.get("file"), f.get("line")) for f in frames if f["kind"] == "python"]
            assert py[:3] == levels, frames
            assert frames[0]["function"] == op
            threads += any(str(f.get("function", "")).endswith("_bootstrap_inner") for f in frames)
        # one stack from the main thread's <module>, one from the worker thread
        assert threads >= 1, stacks
