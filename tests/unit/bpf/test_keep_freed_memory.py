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


_THREAD_PROBE = """
import json, resource, sys, threading
import numpy as np
from gpuscope.bpf.libbpf import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
a = np.ones(48 << 20, dtype=np.uint8)  # freed by the main thread
del a
got = {}
def work():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(48 << 20, dtype=np.uint8)  # allocated by another thread
    got["faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
t = threading.Thread(target=work)
t.start()
t.join()
print(json.dumps({"kept": kept, "faults": got["faults"]}))
"""


def test_memory_one_thread_frees_is_reused_by_another() -> None:
    # explain's rules run on two threads: each would otherwise allocate from an arena of its own
    out = {
        mode: json.loads(
            subprocess.run(
                [sys.executable, "-c", _THREAD_PROBE, mode], capture_output=True, text=True, check=True
            ).stdout
        )
        for mode in ("default", "keep")
    }
    assert out["keep"]["kept"] is True
    assert out["default"]["faults"] >= 12
    assert out["keep"]["faults"] * 8 <= out["default"]["faults"]
