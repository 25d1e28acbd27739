"""keep_freed_memory: memory a process frees is reused without the kernel faulting it in again."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, resource, sys
import numpy as np
from gpuscope.bpf.libbpf import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
a = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB: above glibc's default threshold for giving memory back
del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(64 << 20, dtype=np.uint8)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"kept": kept, "faults": faults}))
"""


def _run(mode: str) -> dict[str, int | bool | None]:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    result: dict[str, int | bool | None] = json.loads(out.stdout)
    return result


def test_freed_blocks_are_reused_instead_of_faulted_in_again() -> None:
    default, kept = _run("default"), _run("keep")
    assert kept["kept"] is True  # glibc (Debian) has mallopt and takes the setting
    # By default the second 64 MiB comes fresh from the kernel, page by page (or huge page by huge page);
    # kept, it is the first one's memory again.
    assert isinstance(default["faults"], int) and isinstance(kept["faults"], int)
    assert default["faults"] >= 16
    assert kept["faults"] * 8 <= default["faults"]
