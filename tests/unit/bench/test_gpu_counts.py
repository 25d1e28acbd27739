"""The GPU validation's count check (bench/gpu/counts.py): CUPTI's Chrome trace and a recording, read alike."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpuscope.model.ops import Op
from tests.unit.analysis.builder import MS, US, Events, end_session

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def counts() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_counts", ROOT / "bench" / "gpu" / "counts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_counts"] = module
    spec.loader.exec_module(module)
    return module


def _api(cat: str, name: str, ts: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": 2.0, "args": {"correlation": corr}}


def _gpu(cat: str, ts: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": "k", "ts": ts, "dur": 5.0, "args": {"correlation": corr}}


def test_cupti_counts_only_the_calls_made_inside_the_window_and_the_gpu_work_they_issued(
    counts: ModuleType, tmp_path: Path
) -> None:
    # given a trace whose window annotation spans [1000, 2000] µs
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "gs_window", "ts": 1000.0, "dur": 1000.0},
        _api("cuda_runtime", "cudaLaunchKernel", 900.0, 1),  # before the window
        _gpu("kernel", 1005.0, 1),  # ...its kernel runs inside it: not the window's
        _api("cuda_runtime", "cudaLaunchKernel", 1100.0, 2),
        _api("cuda_runtime", "cudaLaunchKernel_ptsz", 1200.0, 3),
        _api("cuda_driver", "cuLaunchKernelEx", 1300.0, 4),
        _api("cuda_runtime", "cudaMemcpyAsync", 1400.0, 5),
        _api("cuda_runtime", "cudaMemsetAsync", 1999.0, 6),
        _api("cuda_runtime", "cudaStreamSynchronize", 2500.0, 7),  # after it
        _gpu("kernel", 1110.0, 2),
        _gpu("kernel", 1210.0, 3),
        _gpu("kernel", 2100.0, 4),  # issued inside, still running when it closed: the window's
        _gpu("gpu_memcpy", 1410.0, 5),
        _gpu("gpu_memset", 2001.0, 6),
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    # when
    got = counts.cupti_counts(trace)
    # then
    assert got.runtime == Counter(
        {"cudaLaunchKernel": 1, "cudaLaunchKernel_ptsz": 1, "cudaMemcpyAsync": 1, "cudaMemsetAsync": 1}
    )
    assert got.driver == Counter({"cuLaunchKernelEx": 1})
    assert (got.kernels, got.memcpys, got.memsets) == (3, 1, 1)


def test_a_trace_without_exactly_one_window_is_refused(counts: ModuleType, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [_api("cuda_runtime", "cudaLaunchKernel", 1.0, 1)]}))
    with pytest.raises(ValueError, match="expected one 'gs_window' annotation, found 0"):
        counts.cupti_counts(trace)


def test_recorded_counts_read_calls_of_one_process_in_a_window(counts: ModuleType, tmp_path: Path) -> None:
    # given a recording: pid 100 launches 10 times a ms and synchronizes once; pid 200 launches too; host rows
    ev = Events()
    for i in range(10):
        ev.add(Op.cudaLaunchKernel, i * MS, 5 * US)
        ev.add(Op.cuLaunchKernel, i * MS + US, 3 * US)
    ev.add(Op.cudaStreamSynchronize, 20 * MS, 50 * US)
    ev.add(Op.cudaLaunchKernel, 5 * MS, 5 * US, pid=200)
    ev.add(Op.sched_switch, 3 * MS, 100 * US)
    db = ev.to_db(tmp_path / "r.db")
    end_session(db, 30 * MS, recorded=len(ev.rows))
    # then
    assert counts.recorded_counts(db, 100) == Counter(
        {"cudaLaunchKernel": 10, "cuLaunchKernel": 10, "cudaStreamSynchronize": 1}
    )
    assert counts.recorded_counts(db, 100, (2 * MS, 4 * MS + US)) == Counter(
        {"cudaLaunchKernel": 3, "cuLaunchKernel": 3}
    )
    assert counts.traced_pids(db) == [100, 200]


def test_compare_pairs_each_op_with_cuptis_names_for_the_same_api(counts: ModuleType) -> None:
    cupti = counts.CuptiCounts(
        runtime=Counter({"cudaLaunchKernel": 5, "cudaLaunchKernel_ptsz": 2, "cudaMemsetAsync": 9}),
        driver=Counter({"cuLaunchKernelEx": 4}),
    )
    recorded = Counter({"cudaLaunchKernel": 7, "cudaMemsetAsync": 6, "cuLaunchKernel": 7, "cuLaunchKernelEx": 4})
    rows = {c.api: (c.gpuscope, c.cupti, c.exact) for c in counts.compare(recorded, cupti)}
    assert rows == {
        "cudaLaunchKernel": (7, 7, True),
        "cudaMemsetAsync": (6, 9, False),
        "cuLaunchKernel": (7, 0, False),
        "cuLaunchKernelEx": (4, 4, True),
    }
    assert counts.launches(recorded) == {"runtime": 7, "driver": 11, "graph_runtime": 0, "graph_driver": 0}
    assert counts.memsets(Counter({"cudaMemsetAsync": 3, "cuMemsetD8Async": 2, "cuMemsetD32Async": 4})) == {
        "runtime": 3,
        "driver": 6,
    }
