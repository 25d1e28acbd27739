"""The dataloader-starvation demo's live workload: a training loop whose batches are built in Python.

``dataloader_loop.py LIBCUDART STEPS`` loads each batch as a DataLoader with
``num_workers=0`` does (``Dataset.__getitem__`` once per sample, in Python,
then ``collate``) on the thread that feeds the GPU, then launches the step's
40 kernels through the stand-in libcudart and synchronises. The GPU idles
while the batch is built. Run by ``gpuscope demo dataloader-starvation``.
"""

from __future__ import annotations

import ctypes
import math
import sys


class Dataset:
    """Samples decoded and augmented in pure Python, one at a time."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> list[float]:
        pixels = [((i * 7919 + k * 104729) % 255) / 255.0 for k in range(3000)]
        return [math.tanh(p - 0.5) for p in pixels]


def collate(samples: list[list[float]]) -> list[float]:
    """Stack the samples into one batch, column by column."""
    return [sum(col) / len(samples) for col in zip(*samples, strict=True)]


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    steps = int(sys.argv[2])
    data = Dataset(1 << 20)
    for step in range(steps):
        batch = collate([data[step * 32 + j] for j in range(32)])
        for _ in range(40):
            lib.cudaLaunchKernel(None, 0, 0, None, 0, None)
        lib.cudaStreamSynchronize(None)
        del batch


if __name__ == "__main__":
    main()
