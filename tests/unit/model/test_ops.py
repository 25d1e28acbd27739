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
    ],
)
def test_versioned_variants_resolve_to_the_base_op(symbol: str, op: Op) -> None:
    assert op_for_symbol(symbol) is op


@pytest.mark.parametrize("symbol", ["cudaMallocPitch", "cudaGetDeviceCount", "cuInit", "sched_switch", "cudaMalloc_x"])
def test_unprobed_symbols_map_to_nothing(symbol: str) -> None:
    assert op_for_symbol(symbol) is None


def test_ranges_give_the_source() -> None:
    assert source_of(Op.cudaFree) is Source.CUDA
    assert source_of(Op.cuCtxSynchronize) is Source.DRIVER
    assert source_of(Op.sched_switch) is Source.HOST


def test_every_op_has_a_kind_and_description() -> None:
    assert set(OPS) == {o for o in Op if o is not Op.UNKNOWN}
    assert all(info.description for info in OPS.values())
