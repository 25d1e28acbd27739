"""`make demo`: trace a workload end to end on this machine, then explain it.

With an NVIDIA GPU, print how to trace a real workload. Without one, build a
training-loop stand-in against gpuscope's bundled stand-in CUDA library, run
it while CPU hogs share its core for part of the run, trace it with the real
eBPF tracer, and explain what happened.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    if shutil.which("nvidia-smi") and os.path.exists("/proc/driver/nvidia/version"):
        print("NVIDIA GPU found. Trace a real workload with:")
        print("  sudo .venv/bin/gpuscope trace -- python train.py")
        print("  .venv/bin/gpuscope explain")
        return 0
    from gpuscope.bpf.loader import object_path  # noqa: F401 - fail early if not built

    standin = Path(str(__import__("gpuscope").__path__[0])) / "_standin"
    work = Path(tempfile.mkdtemp(prefix="gpuscope-demo-"))
    exe = work / "train"
    subprocess.run(
        ["cc", "-O1", "-fno-omit-frame-pointer", "-o", str(exe), str(ROOT / "tests/workloads/demo_train.c"),
         f"-L{standin}", "-l:libcudart.so.12", f"-Wl,-rpath,{standin}"],
        check=True,
    )  # fmt: skip
    db = work / "demo.db"
    env = dict(os.environ, GPUSCOPE_STANDIN_LATENCY="cudaStreamSynchronize=3ms,cudaMemcpy=200us")
    print("no GPU: tracing a training-loop stand-in on the bundled stand-in CUDA library")
    print("(CPU hogs are pinned to its core for part of the run)\n")
    trace = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "trace", "--db", str(db), "--lib", str(standin / "libcudart.so.12"),
         "--", "taskset", "-c", "0", str(exe), "600"],
        env=env,
    )  # fmt: skip
    time.sleep(1.0)
    hogs = [subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        rc = trace.wait()
    finally:
        for h in hogs:
            h.kill()
    if rc != 0:
        return rc
    print()
    explain = subprocess.run([sys.executable, "-m", "gpuscope", "explain", "--db", str(db)], check=False)
    print(f"\ndata kept in {db}: try `.venv/bin/gpuscope explain --db {db} --json`")
    return explain.returncode


if __name__ == "__main__":
    sys.exit(main())
