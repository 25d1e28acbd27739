"""The worst case for a per-call tracer: tiny kernels launched back to back, nothing else.

Prints one JSON line: microseconds per launch over the timed loop (the GPU keeps up, so the loop is bound by
the host's launch path, where every traced call's cost lands).

    python launches.py --n 200000 [--profile on]
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--profile", choices=["none", "on"], default="none", help="torch.profiler over the timed loop")
    ap.add_argument(
        "--warmup-s",
        type=float,
        default=0.0,
        help="launch for this long before the timed loop (a tracer's first seconds)",
    )
    a = ap.parse_args()
    x = torch.zeros(1, device="cuda")
    for _ in range(2000):
        x.add_(1)
    deadline = time.monotonic() + a.warmup_s
    while time.monotonic() < deadline:
        for _ in range(1000):
            x.add_(1)
    torch.cuda.synchronize()
    prof = None
    if a.profile == "on":
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    t0 = time.monotonic_ns()
    for _ in range(a.n):
        x.add_(1)
    torch.cuda.synchronize()
    t1 = time.monotonic_ns()
    if prof is not None:
        prof.__exit__(None, None, None)
    print(json.dumps({"launches": a.n, "us_per_launch": (t1 - t0) / a.n / 1e3, "window_ns": [t0, t1]}), flush=True)


if __name__ == "__main__":
    main()
