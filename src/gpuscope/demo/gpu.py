"""What GPU this machine has, and the PyTorch versions of the scenarios for ``--gpu``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuscope.errors import EnvironmentUnsupported

TORCH_DIR = Path(__file__).resolve().parent / "torch"


class NoGpuError(EnvironmentUnsupported):
    remedy = (
        "run the demo on the stand-in CUDA library instead: `gpuscope demo` (live, as root) or "
        "`gpuscope demo --synthetic` (no root); --gpu needs an NVIDIA GPU, its driver and PyTorch with CUDA"
    )


@dataclass(frozen=True, slots=True)
class GpuInfo:
    name: str
    driver: str

    def describe(self) -> str:
        return f"{self.name}, driver {self.driver}"


def detect_gpu() -> GpuInfo | None:
    """The first NVIDIA GPU and the driver version (from nvidia-smi, else /proc), or None."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0 and out.stdout.strip():
            name, _, driver = out.stdout.strip().splitlines()[0].partition(",")
            return GpuInfo(name.strip(), driver.strip() or "?")
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    words = text.split()
    driver = next((w for w in words if w[:1].isdigit() and "." in w), "?")
    return GpuInfo("NVIDIA GPU", driver)


def torch_cuda(python: str = sys.executable) -> str | None:
    """Why PyTorch cannot use the GPU from ``python``, or None when it can."""
    try:
        p = subprocess.run(
            [python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    if p.returncode == 3:
        return "PyTorch is installed but torch.cuda.is_available() is False"
    if p.returncode != 0:
        return f"PyTorch is not importable from {python}"
    return None


def script_path(name: str) -> Path:
    return TORCH_DIR / name
