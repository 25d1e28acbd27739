# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""periodic-spike on a real GPU: empty_cache() in the loop makes the caching allocator give its memory back.

A warm caching allocator makes no cudaMalloc at all, so on a real GPU the spikes are the allocation calls
themselves: every 50 steps the 1 GiB buffer goes back to the driver (cudaFree) and is taken again (cudaMalloc).
The step's GPU work is kept small (1 MiB of the buffer is written) so the churn, not the GPU, sets the pace.
"""

import time

import torch
from _common import scale

end = time.monotonic() + 8.0 * scale()
i = 0
while time.monotonic() < end:
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    x[: 1 << 20].fill_(1)
    torch.cuda.synchronize()
    del x
    i += 1
    if i % 50 == 0:
        torch.cuda.empty_cache()
