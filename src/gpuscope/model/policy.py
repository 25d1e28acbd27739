"""What selective storage keeps, shared by the writer that applies it and the analysis that undoes it.

The agent stores every call slower than ``SLOW_FACTOR`` times its op's running
median, and one in ``SAMPLE_EVERY`` of the rest of the high-rate ops
(launches, copies, memsets, wakeups). Analysis reads thinned rows and must
know both numbers to tell a thinned recording from a sparse one.
"""

from __future__ import annotations

from gpuscope.model.ops import OPS, Op, OpKind

SLOW_FACTOR = 3.0
SAMPLE_EVERY = 100
# During the first --keep-first seconds every row is kept, up to this many rows a
# second per process of the sampled ops (launches, copies, memsets, wakeups).
WARMUP_ROWS_PER_S = 20_000

# The ops the default mode probes in windows under the overhead budget: the high-rate calls whose single
# timing matters least (kernel launches, memsets, asynchronous copies). Every other probed call (syncs,
# allocations and frees, synchronous copies, CUDA Graph and NCCL calls) is probed all the time.
SAMPLED_PROBE_OPS = frozenset(
    int(op) for op, info in OPS.items() if info.kind in (OpKind.LAUNCH, OpKind.SET)
) | frozenset({int(Op.cudaMemcpyAsync), int(Op.cuMemcpyAsync)})
# The default overhead budget: gpuscope's probes may take this share of a traced process's CPU time.
DEFAULT_BUDGET = 0.01

# On-CPU samples of traced threads, per second of a thread's CPU time (`trace --cpu-samples`). 49, not 50: a
# rate that shares no period with the millisecond timers of most programs, so samples do not lock onto them.
# At this rate a busy thread pays ~0.1% of its CPU time (measured in the program: 21.7 us a sample, 0.107%;
# bench/cpu_sample_bench.py).
DEFAULT_CPU_SAMPLE_HZ = 49
MAX_CPU_SAMPLE_HZ = 999
# What one sample costs the sampled thread, rounded up (bench/cpu_sample_bench.py: 13-22 us in the program),
# and the most of the overhead budget the sampler is given by default (the rest is the probes').
SAMPLE_COST_S = 25e-6
SAMPLER_BUDGET_SHARE = 0.25
