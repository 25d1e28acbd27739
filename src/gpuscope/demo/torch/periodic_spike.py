# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""periodic-spike on a real GPU: empty_cache() every 200 steps makes cudaMalloc go back to the driver."""

import torch
from _common import scale

for i in range(int(1200 * scale()) + 600):
    x = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    del x
    if i % 200 == 100:
        torch.cuda.empty_cache()
