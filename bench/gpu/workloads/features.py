"""CUDA Graphs and NCCL on one GPU, with the lines that make each call, for the feature check.

torch.distributed with the NCCL backend at world size 1 (``ncclCommInitRank`` with rank 0 of 1, then
collectives), then a captured CUDA graph replayed. Prints one JSON line: how many of each the script made and
the source line of each call site, so the trace's Python stacks can be checked against them.

    python features.py --allreduce 20 --replays 50
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

SITES: dict[str, int] = {}


def at(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``, noting the line that called ``at``: the trace's Python stack must show that line."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    SITES[name] = frame.f_back.f_lineno
    return fn(*args, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--allreduce", type=int, default=20)
    ap.add_argument("--broadcast", type=int, default=5)
    ap.add_argument("--replays", type=int, default=50)
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
    t = torch.ones(1 << 20, device=dev)
    for _ in range(a.allreduce):
        at("all_reduce", dist.all_reduce, t)
    for _ in range(a.broadcast):
        at("broadcast", dist.broadcast, t, src=0)
    torch.cuda.synchronize()

    # A captured graph: a few kernels, replayed.
    static_in = torch.randn(256, 256, device=dev)
    w = torch.randn(256, 256, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            (static_in @ w).relu().sum()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = (static_in @ w).relu() + 1.0
    torch.cuda.synchronize()
    time.sleep(0.02)
    t0 = time.monotonic_ns()
    for _ in range(a.replays):
        at("replay", g.replay)
    torch.cuda.synchronize()
    t1 = time.monotonic_ns()
    value = float(static_out.sum().item())
    dist.destroy_process_group()
    print(
        json.dumps(
            {
                "allreduce": a.allreduce,
                "broadcast": a.broadcast,
                "replays": a.replays,
                "replay_window_ns": [t0, t1],
                "sites": SITES,
                "file": os.path.abspath(__file__),
                "checksum": value,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
