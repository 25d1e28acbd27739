"""gpuscope's stand-in CUDA libraries: a runtime, a driver and NCCL that answer by name, without a GPU.

Built from ``native/standin`` into the package. The demo's workloads run on
them, and so does a user's own job where there is no GPU (``trace --standin``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

STANDIN_DIR = Path(__file__).resolve().parents[1] / "_standin"


def standin_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours) with the stand-in folder first on ``LD_LIBRARY_PATH``."""
    out = dict(os.environ if env is None else env)
    rest = out.get("LD_LIBRARY_PATH")
    out["LD_LIBRARY_PATH"] = f"{STANDIN_DIR}:{rest}" if rest else str(STANDIN_DIR)
    return out
