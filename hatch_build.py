"""Build hook: compile the BPF programs and the stand-in CUDA libraries into the wheel.

The target architecture is this machine's, or GPUSCOPE_TARGET_ARCH (x86_64,
aarch64: `make wheel ARCH=aarch64`). The BPF objects are CO-RE, so one set per
architecture runs on every kernel with BTF; the wheel's tag is
``py3-none-manylinux_X_Y_<arch>`` with X.Y the newest glibc symbol version
its stand-in libraries need (scripts/wheel_tag.py), the tag PyPI accepts.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts"))
import build_native
import wheel_tag


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        # An editable install runs from the checkout: this machine's files, in src/gpuscope.
        target = build_native.target(platform.machine() if version == "editable" else None)
        out = build_native.package_dir(self.root, target)
        built = build_native.build_all(self.root, out, target)
        build_data["pure_python"] = False
        build_data["tag"] = wheel_tag.manylinux_tag([p for p in built if ".so" in p], target.machine)
        if version != "editable":
            # Named one by one: src/gpuscope/_bpf may hold another build's files.
            for path in built:
                build_data["force_include"][path] = os.path.join("gpuscope", os.path.relpath(path, out))
