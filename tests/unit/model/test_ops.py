"""Library symbols map to ops: versioned variants share one op."""

from __future__ import annotations

import pytest

from gpuscope.model.ops import OPS, Op, Source, op_for_symbol, source_of


@pytest.mark.parametrize(
    ("symbol", "op"),
    [
        ("cudaMalloc", Op.cudaMalloc),
        ("cudaMemcpy_ptds", Op.cudaMemcpy),
        ("cudaMemcpyAsync_ptsz", Op.cudaMemcpyAsync),
        ("cudaLaunchKernel_ptsz", Op.cudaLaunchKernel),
        ("cudaLaunchKernelExC", Op.cudaLaunchKernelExC),
        ("cuMemAlloc", Op.cuMemAlloc),
        ("cuMemAlloc_v2", Op.cuMemAlloc),
        ("cuMemFree_v2", Op.cuMemFree),
        ("cuMemcpyHtoD_v2", Op.cuMemcpyHtoD),
        ("cuMemcpyDtoH_v2_ptds", Op.cuMemcpyDtoH),
        ("cuLaunchKernel_ptsz", Op.cuLaunchKernel),
        ("cuStreamSynchronize_ptsz", Op.cuStreamSynchronize),
        ("cuMemsetD8_v2", Op.cuMemsetD8),
        ("cuMemsetD16_v2_ptds", Op.cuMemsetD16),
        ("cuMemsetD32_v2", Op.cuMemsetD32),
        ("cuMemsetD8Async", Op.cuMemsetD8Async),
        ("cuMemsetD16Async_ptsz", Op.cuMemsetD16Async),
        ("cuMemsetD32Async_ptsz", Op.cuMemsetD32Async),
    ],
)
def test_versioned_variants_resolve_to_the_base_op(symbol: str, op: Op) -> None:
    assert op_for_symbol(symbol) is op


# cuMemsetD2D* take a pitch and a height: their N is not the element count, so they are not read as 1-D memsets.
@pytest.mark.parametrize(
    "symbol",
    ["cudaMallocPitch", "cudaGetDeviceCount", "cuInit", "sched_switch", "cudaMalloc_x", "cuMemsetD2D8_v2"],
)
def test_unprobed_symbols_map_to_nothing(symbol: str) -> None:
    assert op_for_symbol(symbol) is None


def test_ranges_give_the_source() -> None:
    assert source_of(Op.cudaFree) is Source.CUDA
    assert source_of(Op.cuCtxSynchronize) is Source.DRIVER
    assert source_of(Op.sched_switch) is Source.HOST


def test_every_op_has_a_kind_and_description() -> None:
    assert set(OPS) == {o for o in Op if o is not Op.UNKNOWN}
    assert all(info.description for info in OPS.values())


def test_driver_memsets_are_fills_like_the_runtime_memsets() -> None:
    memsets = [
        Op.cuMemsetD8,
        Op.cuMemsetD16,
        Op.cuMemsetD32,
        Op.cuMemsetD8Async,
        Op.cuMemsetD16Async,
        Op.cuMemsetD32Async,
    ]
    assert {OPS[op].kind for op in memsets} == {OPS[Op.cudaMemset].kind, OPS[Op.cudaMemsetAsync].kind}
    assert {OPS[op].source for op in memsets} == {Source.DRIVER}
