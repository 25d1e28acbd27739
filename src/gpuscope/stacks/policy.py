"""Which calls carry a stack: the cost-control policy.

A native stack costs about a microsecond at the probe and a Python walk a few
more, so stacks are taken on every call of the rarer, slower APIs (allocations,
frees, copies, synchronisations, graph and NCCL calls) and on one launch in
``launch_every`` per CPU: launches are the hottest path, and a training step
repeats the same launch sites thousands of times, so sampling loses no site
that matters. ``gpuscope trace --stack-every OP=N`` overrides one op (0 = never,
1 = always, N = one call in N).
"""

from __future__ import annotations

from gpuscope.errors import UsageError
from gpuscope.model.ops import Op

DEFAULT_LAUNCH_EVERY = 64
_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def stack_policy(
    launch_every: int = DEFAULT_LAUNCH_EVERY, overrides: dict[str, int] | None = None
) -> tuple[tuple[int, int], ...]:
    """(op id, every) for every CUDA, driver and NCCL op."""
    out: dict[int, int] = {}
    for op in Op:
        if 0 < int(op) < 192:
            out[int(op)] = launch_every if op.name in _LAUNCHES else 1
    for name, every in (overrides or {}).items():
        try:
            op = Op[name]
        except KeyError:
            raise UsageError(f"--stack-every: unknown op {name!r}") from None
        out[int(op)] = every
    return tuple(sorted(out.items()))


def parse_overrides(values: list[str]) -> dict[str, int]:
    """``["cudaLaunchKernel=16", "cudaFree=0"]`` -> {op: every}."""
    out: dict[str, int] = {}
    for v in values:
        name, _, n = v.partition("=")
        if not n.isdigit():
            raise UsageError(f"--stack-every wants OP=N (N >= 0), got {v!r}")
        out[name] = int(n)
    return out
