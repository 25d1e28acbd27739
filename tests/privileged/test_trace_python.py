"""Python workloads calling libcudart through ctypes: the stand-in and the real wheel's copy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.privileged.support import json_line, pack_dim

WORKLOAD = Path(__file__).resolve().parent.parent / "workloads" / "py_calls.py"
PY_OPS = ("cudaMalloc", "cudaLaunchKernel", "cudaStreamSynchronize", "cudaDeviceSynchronize")


# The runtime wheels of two CUDA majors: 12 (nvidia-cuda-runtime-cu12) and 13 (nvidia-cuda-runtime, laid out
# as nvidia/cu13/lib, as PyTorch's CUDA 13 builds load it).
REAL_RUNTIMES = {"12": ("nvidia.cuda_runtime", "libcudart.so.12"), "13": ("nvidia.cu13", "libcudart.so.13")}


def real_libcudart(major: str = "12") -> Path:
    """libcudart from NVIDIA's wheel for that CUDA major (a namespace package: no __file__)."""
    package, name = REAL_RUNTIMES[major]
    module = pytest.importorskip(package)
    for base in module.__path__:
        lib = Path(base) / "lib" / name
        if lib.is_file():
            return lib
    pytest.fail(f"{package} has no lib/{name} under {list(module.__path__)}")


@pytest.mark.parametrize("threads", [1, 3])
def test_calls_made_through_ctypes_are_recorded_exactly(trace_command, standin, threads):
    # given a Python program calling the stand-in libcudart 120 times per API on each thread
    # when it is traced
    run = trace_command([sys.executable, str(WORKLOAD), str(standin.cudart), "120", str(threads)])
    # then
    assert run.returncode == 0, run.stderr
    out = json_line(run.stdout)
    counts = run.op_counts()
    for op in PY_OPS:
        assert counts.get(op) == 120 * threads, (op, counts)
    # and the calls carry the interpreter's pid and comm, and the worker threads' tids
    rows = run.query("SELECT DISTINCT pid, tid, comm FROM events WHERE source = 'cuda'")
    assert {r[0] for r in rows} == {out["pid"]}
    assert sorted(r[1] for r in rows) == sorted(out["tids"])
    assert {r[2] for r in rows} == {out["comm"]}
    assert str(out["comm"]).startswith("python")
    # and the dim3 structures passed by value are decoded
    assert run.query("SELECT DISTINCT arg0, arg1, bytes, stream FROM events WHERE op = 'cudaLaunchKernel'") == [
        (pack_dim(128, 2, 1), pack_dim(256, 1, 1), 48, 0x5151)
    ]
    assert run.query("SELECT events_dropped FROM sessions") == [(0,)]


@pytest.mark.parametrize("major", sorted(REAL_RUNTIMES))
def test_calls_into_the_real_libcudart_are_recorded_with_the_error_they_returned(trace_command, standin, major):
    # given the real libcudart of CUDA 12 or 13, which fails fast without a GPU driver,
    # and no stand-in libcuda on the library path
    lib = real_libcudart(major)
    env = standin.env()
    env.pop("LD_LIBRARY_PATH")
    # when a Python program calls it 60 times per API on 2 threads, probing only that copy
    run = trace_command([sys.executable, str(WORKLOAD), str(lib), "60", "2"], env=env, libs=[lib])
    # then every call is recorded once
    assert run.returncode == 0, run.stderr
    out = json_line(run.stdout)
    counts = run.op_counts()
    for op in PY_OPS:
        assert counts.get(op) == 120, (op, counts)
    # and each call's recorded return code is the one Python saw, and it is an error
    rets: dict[str, list[int]] = out["rets"]
    for op in PY_OPS:
        recorded = [r for (r,) in run.query("SELECT DISTINCT ret FROM events WHERE op = ?", (op,))]
        assert recorded == rets[op], op
        assert 0 not in recorded, op
    # and the launch arguments are read from the real library's calling convention
    assert run.query("SELECT DISTINCT arg0, arg1, bytes, stream FROM events WHERE op = 'cudaLaunchKernel'") == [
        (pack_dim(128, 2, 1), pack_dim(256, 1, 1), 48, 0x5151)
    ]
    assert run.query("SELECT DISTINCT pid FROM events WHERE source = 'cuda'") == [(out["pid"],)]
