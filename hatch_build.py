"""Build hook: compile the BPF programs and the stand-in CUDA libraries.

The BPF objects are architecture-specific (pt_regs layout), not
Python-specific, so the wheel is tagged ``py3-none-linux_<machine>``.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts"))
import build_native


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        build_native.build_all(self.root, out_pkg=os.path.join(self.root, "src", "gpuscope"))
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-linux_{platform.machine()}"
