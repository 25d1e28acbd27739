"""What selective storage keeps, shared by the writer that applies it and the analysis that undoes it.

The agent stores every call slower than ``SLOW_FACTOR`` times its op's running
median, and one in ``SAMPLE_EVERY`` of the rest of the high-rate ops
(launches, copies, memsets, wakeups). Analysis reads thinned rows and must
know both numbers to tell a thinned recording from a sparse one.
"""

from __future__ import annotations

SLOW_FACTOR = 3.0
SAMPLE_EVERY = 100
# During the first --keep-first seconds every row is kept, up to this many rows a
# second per process of the sampled ops (launches, copies, memsets, wakeups).
WARMUP_ROWS_PER_S = 20_000
