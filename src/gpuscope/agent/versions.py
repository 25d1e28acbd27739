"""Version facts shown by `gpuscope version` and stored with each session."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import cache
from importlib import resources

from gpuscope._version import __version__
from gpuscope.errors import GpuscopeError


@cache
def commit() -> str:
    """The build's commit: a file written at build time, else git, else 'unknown'."""
    try:
        stamp = resources.files("gpuscope") / "_bpf" / "COMMIT"
        text = stamp.read_text().strip()
        if text:
            return text
    except OSError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=2, check=False
        )
        if out.returncode == 0:
            return out.stdout.strip()
    except OSError:
        pass
    return "unknown"


def libbpf_version() -> str:
    from gpuscope.bpf.libbpf import libbpf

    try:
        major, minor = libbpf().version()
    except GpuscopeError:
        return "not found"
    return f"{major}.{minor}"


def version_info() -> dict[str, str]:
    return {
        "version": __version__,
        "commit": commit(),
        "libbpf": libbpf_version(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
