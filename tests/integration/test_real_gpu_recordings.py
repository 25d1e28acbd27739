"""Recordings made on a real H100 with PyTorch 2.11 / CUDA 13 by bench/gpu/validate.py (tests/fixtures/gpu/).

What they pin: explain on a real training run, the counts against CUPTI's for the same window (h100.json holds
CUPTI's side, from torch.profiler in the same run), NCCL ranks and Python call sites. Source paths in them were
rewritten to /opt/gpuscope/; nothing else was changed.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import gpuscope

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
FACTS: dict[str, Any] = json.loads((FIXTURES / "h100.json").read_text())


def _unpack(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    out = tmp_path_factory.mktemp("gpu") / name
    with gzip.open(FIXTURES / f"{name}.gz", "rb") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _unpack(tmp_path_factory, "h100-train.db")


@pytest.fixture(scope="module")
def features(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _unpack(tmp_path_factory, "h100-features.db")


def _counts(db: Path, pid: int, window: list[int] | None = None) -> dict[str, int]:
    sql = "SELECT op, count(*) AS n FROM events WHERE pid = ?"
    params: list[int] = [pid]
    if window:
        sql += " AND ts_ns BETWEEN ? AND ?"
        params += window
    return {r["op"]: r["n"] for r in gpuscope.open(db, frame="rows").query(sql + " GROUP BY op", params)}


def test_explain_on_a_real_training_run_finds_no_leak_and_no_drop_in_its_warm_up(train: Path) -> None:
    # A caching allocator filling up in the first steps and a slow start-up looked like a 4.2 GiB leak and a
    # 100% throughput drop before the rules read growth over the process's work and drops after its ramp-up.
    findings = gpuscope.open(train).explain()
    kinds = [f.kind for f in findings]
    assert "memory-leak" not in kinds and "throughput-drop" not in kinds
    # A 55M-parameter GPT on an H100: ~476 kernels a step (CUPTI), the syncs find the GPU done, so the step
    # is its launches: launch-bound, at most MEDIUM, with the launches a step the profiler counted.
    assert kinds == ["launch-bound", "cold-start"]
    per_step = findings[0].causes[0].metrics["launches_per_step"]
    assert abs(per_step - FACTS["train"]["cupti_kernels"] / FACTS["train"]["workload"]["steps"]) < 0.1 * per_step
    assert findings[0].severity.name == "MEDIUM"


def test_the_measured_window_holds_exactly_the_calls_cupti_saw(train: Path) -> None:
    t = FACTS["train"]
    got = _counts(train, t["pid"], t["window_ns"])
    for op in ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize"):
        assert got[op] == t["cupti_runtime"][op], op
    assert got["cuLaunchKernelEx"] == t["cupti_driver"]["cuLaunchKernelEx"]
    # every kernel the GPU ran was launched through the driver, the runtime's launches included
    assert got["cuLaunchKernel"] + got["cuLaunchKernelEx"] == t["cupti_kernels"]
    # cuBLAS's own (static) runtime never enters libcudart.so: its memsets are seen at the driver alone
    assert got["cudaMemsetAsync"] < t["cupti_runtime"]["cudaMemsetAsync"]
    driver_memsets = sum(n for op, n in got.items() if op.startswith("cuMemsetD"))
    assert driver_memsets == t["cupti_runtime"]["cudaMemsetAsync"] == t["cupti_memsets"]
    # and what the script did: one .item() wait per GradScaler step and per logged loss, one synchronize
    made = t["workload"]["made"]
    assert got["cudaStreamSynchronize"] == t["workload"]["scaler_steps"] + made["item"]
    assert got["cudaDeviceSynchronize"] == made["synchronize"]
    # every cudaMalloc is one segment of the caching allocator
    assert _counts(train, t["pid"])["cudaMalloc"] == t["workload"]["segments_total"]


def test_nccl_collectives_carry_the_rank_their_communicator_was_made_with(features: Path) -> None:
    f = FACTS["features"]
    rows = gpuscope.open(features, frame="rows").query(
        "SELECT op, comm_rank, nranks, count(*) AS n FROM nccl_calls WHERE pid = ? GROUP BY 1, 2, 3", [f["pid"]]
    )
    got = {r["op"]: (r["comm_rank"], r["nranks"], r["n"]) for r in rows}
    w = f["workload"]
    assert got["ncclAllReduce"] == (0, 1, w["allreduce"])
    assert got["ncclBroadcast"] == (0, 1, w["broadcast"])
    assert got["ncclCommInitRankConfig"][:2] == (0, 1)


def test_graph_replays_and_collectives_have_python_stacks_at_the_lines_that_made_them(features: Path) -> None:
    f = FACTS["features"]
    w = f["workload"]
    assert _counts(features, f["pid"], w["replay_window_ns"])["cudaGraphLaunch"] == w["replays"]
    rows = gpuscope.open(features, frame="rows").query(
        "SELECT DISTINCT e.op AS op, s.line AS line FROM event_call_stacks e "
        "JOIN stack_frames s ON s.stack_hash = e.stack_hash WHERE e.pid = ? AND s.kind = 'python' AND s.file = ?",
        [f["pid"], w["file"]],
    )
    lines = {(r["op"], r["line"]) for r in rows}
    for op, site in (("ncclAllReduce", "all_reduce"), ("ncclBroadcast", "broadcast"), ("cudaGraphLaunch", "replay")):
        assert (op, w["sites"][site]) in lines, op
