"""Which calls carry a full stack, and which refer to their call site's: the cost-control policy.

A full stack (a frame-pointer walk with build ids, the caller's mapping, a
copy of the stack window and a Python walk) costs microseconds at the probe.
Most calls come from a few call sites that repeat, so the probe first reads
what tells sites apart (the return address at [sp], the caller's return
address, and the innermost Python frame through a cached thread state: a few
user reads) and takes a full stack only on the first call at each site and
on one call in ``every`` after it (1,024 by default); the other calls' events
carry only the site's id, and the collector links them to the site's last
full stack. Every stored call is thus linked to a stack (exact counts per
stack, slow calls included); what the site's stack can get wrong is a deeper
caller that changed since the site's last
full stack (documented in docs/stacks.md).

``gpuscope trace --stack-every OP=N`` overrides one op: 0 no stacks, 1 a full
stack on every call, N a full stack on one call in N per site.
"""

from __future__ import annotations

from gpuscope.errors import UsageError
from gpuscope.model.ops import Op

# Resample a site's full stack every 1,024 calls: a hot site (a launch in a
# training step) then costs a full unwind about once per thousand calls, and
# a deeper caller that changed is seen within 1,023 calls of that site.
DEFAULT_STACK_EVERY = 1024


def stack_policy(
    every: int = DEFAULT_STACK_EVERY, overrides: dict[str, int] | None = None
) -> tuple[tuple[int, int], ...]:
    """(op id, every) for every CUDA, driver and NCCL op."""
    out: dict[int, int] = {int(op): every for op in Op if 0 < int(op) < 192}
    for name, n in (overrides or {}).items():
        try:
            op = Op[name]
        except KeyError:
            raise UsageError(f"--stack-every: unknown op {name!r}") from None
        out[int(op)] = n
    return tuple(sorted(out.items()))


MAX_EVERY = 1_000_000_000  # the stack_policy map holds N in 32 bits; past this, N means "first call only" anyway


def parse_overrides(values: list[str]) -> dict[str, int]:
    """``["cudaLaunchKernel=16", "cudaFree=0"]`` -> {op: every}."""
    out: dict[str, int] = {}
    for v in values:
        name, _, n = v.partition("=")
        if not n.isdigit() or not name:
            raise UsageError(f"--stack-every wants OP=N (N >= 0), got {v!r}")
        if int(n) > MAX_EVERY:
            raise UsageError(
                f"--stack-every {v}: N above {MAX_EVERY:,}",
                remedy="a stack on the first call at each call site only is N = 1000000000 (or 0 for none)",
            )
        out[name] = int(n)
    return out
