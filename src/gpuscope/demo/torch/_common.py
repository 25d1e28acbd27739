# mypy: ignore-errors
# (run standalone by `gpuscope demo --gpu` with PyTorch installed; not imported by gpuscope)
"""Helpers shared by the PyTorch demo scripts (run by `gpuscope demo --gpu`, traced with eBPF)."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

import torch


def scale() -> float:
    return float(sys.argv[1]) if len(sys.argv) > 1 else 1.0


def _hog(stop_at: float) -> None:
    x = 0
    while time.monotonic() < stop_at:
        x += 1


def cpu_hogs(n: int, seconds: float, cpu: int = 0) -> list[mp.Process]:
    """Start n busy loops pinned to ``cpu`` (the training process is pinned there too)."""
    procs = [mp.Process(target=_hog, args=(time.monotonic() + seconds,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
        if p.pid is not None:
            os.sched_setaffinity(p.pid, {cpu})
    return procs


def step(a: torch.Tensor, b: torch.Tensor) -> None:
    (a @ b).sum()
    torch.cuda.synchronize()


def matrices(n: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
