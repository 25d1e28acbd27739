# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""cold-start on a real GPU: context creation and the first launch of several kernels, then steady state."""

import torch
from _common import scale

x = torch.empty(1 << 20, device="cuda")  # context creation
ops = [torch.relu, torch.sigmoid, torch.tanh, torch.exp, torch.sin, torch.cos, torch.sqrt, torch.abs]
for i in range(int(800 * scale()) + 100):
    y = ops[i % len(ops)](x)
    torch.cuda.synchronize()
