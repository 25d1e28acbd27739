# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""dataloader-starvation on a real GPU: batches built in Python on the feeding thread (num_workers=0)."""

import math

import torch
from _common import scale
from torch.utils.data import DataLoader, Dataset


class Decoded(Dataset):
    """Samples decoded and augmented in pure Python, one at a time, as a slow image pipeline does."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        pixels = [((i * 7919 + k * 104729) % 255) / 255.0 for k in range(3 * 32 * 32)]
        return torch.tensor([math.tanh(p - 0.5) for p in pixels]).view(3, 32, 32)


model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64 * 32 * 32, 10)
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Decoded(), batch_size=64, num_workers=0)
steps = int(60 * scale()) + 10
for step, x in enumerate(loader):
    if step == steps:
        break
    loss = model(x.cuda()).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
