# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""memcpy-bottleneck on a real GPU: a pageable 32 MiB batch in and results out every step."""

import torch
from _common import scale

batch = torch.randn(8 << 20)  # pageable host memory
w = torch.randn(1024, 1024, device="cuda")
for _ in range(int(400 * scale()) + 50):
    x = batch.to("cuda")
    y = (x.view(-1, 1024) @ w).relu()
    out = y.cpu()
torch.cuda.synchronize()
