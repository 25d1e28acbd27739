"""`make demo`: on a GPU machine, say how to trace a real workload; otherwise run `gpuscope demo`.

Without a GPU, as root with working eBPF, the demo runs live: real processes
on gpuscope's bundled stand-in CUDA library, traced with eBPF, each scenario
ending in its `explain` report. Without root it falls back to `--synthetic`.
Extra arguments are passed to `gpuscope demo` (e.g. `make demo ARGS=incident`).
"""

from __future__ import annotations

import sys

from gpuscope.cli import main as gpuscope
from gpuscope.demo.gpu import detect_gpu
from gpuscope.platform.invocation import invocation


def main(argv: list[str]) -> int:
    gpu = detect_gpu()
    if gpu is not None and "--gpu" not in argv:
        program = invocation()
        print(f"GPU found: {gpu.describe()}. Trace a real workload with:")
        print(f"  sudo {program} trace -- python train.py")
        print(f"  {program} explain")
        print(f"or run the demo's PyTorch scenarios: sudo {program} demo --gpu")
        return 0
    return gpuscope(["demo", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
