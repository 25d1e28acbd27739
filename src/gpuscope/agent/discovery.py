"""Find every copy of the CUDA libraries a workload could load.

Bundled copies are the common case: PyTorch wheels ship their own libcudart
under site-packages/nvidia/*/lib, conda envs carry theirs, and a launched
command may find one through LD_LIBRARY_PATH or its rpath. Each copy is a
different inode, so each needs its own uprobes.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from gpuscope.model.ops import Op, op_for_symbol
from gpuscope.platform import proc_root
from gpuscope.platform.elf import ElfError, ElfFile, function_offsets
from gpuscope.platform.proc_root import kernel_file_key

LIB_PATTERNS = {
    "cudart": re.compile(r"^libcudart\.so(\.\d+)*$"),
    "cuda": re.compile(r"^libcuda\.so(\.\d+)*$"),
    "nccl": re.compile(r"^libnccl\.so(\.\d+)*$"),
}


@dataclass(frozen=True, slots=True)
class CudaLibrary:
    """One probe-able copy of a CUDA library."""

    path: str  # canonical path (symlinks resolved)
    kind: str  # "cudart" or "cuda"
    version: str  # from the file name, e.g. "12.9.79", or "" when unversioned
    found_via: str  # where discovery saw it first
    inode: tuple[int, int]


def library_kind(path: str) -> str | None:
    base = os.path.basename(path)
    for kind, pat in LIB_PATTERNS.items():
        if pat.match(base):
            return kind
    return None


def _version_of(path: str) -> str:
    m = re.search(r"\.so\.([\d.]+)$", path)
    return m.group(1) if m else ""


def probe_plan(path: str) -> list[tuple[int, Op, str]]:
    """(file offset, op, symbol) for every probed API a library exports.

    Aliases at one address are probed once.
    """
    seen: set[int] = set()
    plan: list[tuple[int, Op, str]] = []
    for name, off in sorted(function_offsets(path).items()):
        op = op_for_symbol(name)
        if op is None or off in seen:
            continue
        seen.add(off)
        plan.append((off, op, name))
    return plan


def _ldconfig_paths() -> list[str]:
    for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=5, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        return [line.rsplit("=>", 1)[1].strip() for line in out.splitlines() if "=>" in line]
    return []


def _site_dirs() -> list[str]:
    dirs = {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    home = os.path.expanduser("~")
    for pattern in (
        "/usr/lib/python3*/dist-packages",
        "/usr/local/lib/python3*/dist-packages",
        "/usr/local/lib/python3*/site-packages",
        f"{home}/.local/lib/python3*/site-packages",
        f"{home}/.pyenv/versions/*/lib/python3*/site-packages",
        "/opt/conda/lib/python3*/site-packages",
        "/opt/conda/envs/*/lib/python3*/site-packages",
        f"{home}/miniconda3/lib/python3*/site-packages",
        f"{home}/miniconda3/envs/*/lib/python3*/site-packages",
        f"{home}/anaconda3/envs/*/lib/python3*/site-packages",
        "./.venv/lib/python3*/site-packages",
    ):
        dirs.update(glob.glob(pattern))
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if os.environ.get(var):
            dirs.update(glob.glob(os.path.join(os.environ[var], "lib", "python3*", "site-packages")))
    return sorted(dirs)


def _lib_dirs(env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(directory, how it was found) to search, most specific first."""
    env = env if env is not None else dict(os.environ)
    out: list[tuple[str, str]] = []
    for d in env.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            out.append((d, "LD_LIBRARY_PATH"))
    for d in glob.glob("/usr/local/cuda*/lib64") + glob.glob("/usr/local/cuda*/targets/*/lib"):
        out.append((d, "CUDA toolkit"))
    for site in _site_dirs():
        for d in [*glob.glob(os.path.join(site, "nvidia", "*", "lib")), os.path.join(site, "torch", "lib")]:
            out.append((d, "python wheel"))
    for prefix in filter(None, [env.get("CONDA_PREFIX"), "/opt/conda"]):
        out.append((os.path.join(prefix, "lib"), "conda"))
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib", "/usr/local/lib"):
        out.append((d, "system"))
    return out


def libraries_in_maps(pid: int) -> list[tuple[str, tuple[int, int]]]:
    """CUDA library paths mapped by a running process, each with the kernel's (dev, inode) of the file mapped."""
    found: dict[str, tuple[int, int]] = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    path = parts[5].strip()
                    if library_kind(path) and path not in found:
                        major, minor = (int(x, 16) for x in parts[3].split(":"))
                        found[path] = ((major << 20) | minor, int(parts[4]))
    except (OSError, ValueError):
        pass
    return list(found.items())


def reachable_path(pid: int, path: str, key: tuple[int, int]) -> str | None:
    """A path here to the file ``pid`` mapped as ``path`` (``key``: the kernel's (dev, inode) of it).

    That path when it names the same file here; else the same path under
    ``/proc/PID/root`` (a container: the host may hold another file, or none,
    at that path). None when neither does (the file is gone).
    """
    path = path.removesuffix(" (deleted)")
    for candidate in (path, f"/proc/{pid}/root{path}"):
        try:
            if kernel_file_key(os.stat(candidate)) == key:
                return candidate
        except OSError:
            continue
    return None


def _rpath_dirs(executable: str) -> list[str]:
    try:
        with ElfFile(executable) as elf:
            return elf.search_path(os.path.dirname(proc_root.resolve(executable)))
    except ElfError:
        return []


class Discovery:
    """Collect CUDA library copies, deduplicated by inode."""

    def __init__(self) -> None:
        self._libs: dict[tuple[int, int], CudaLibrary] = {}

    @property
    def libraries(self) -> list[CudaLibrary]:
        return list(self._libs.values())

    def add(self, path: str, found_via: str) -> CudaLibrary | None:
        """Add one file if it is a CUDA library that exports a probed API."""
        kind = library_kind(path)
        try:
            real = proc_root.resolve(path)  # inside a container's root when the path is one
        except OSError:
            return None
        if kind is None:
            kind = library_kind(real)
        if kind is None:
            return None
        lib, new = self._library_at(real, kind, found_via, (real, path))
        return lib if new else None

    def add_dirs(self, dirs: Iterable[tuple[str, str]]) -> None:
        for d, via in dirs:
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in sorted(names):
                if library_kind(name):
                    self.add(os.path.join(d, name), via)

    def scan_system(self, env: dict[str, str] | None = None) -> None:
        """ldconfig, CUDA toolkits, python wheels, conda, system dirs."""
        self.add_dirs(_lib_dirs(env))
        for path in _ldconfig_paths():
            if library_kind(path):
                self.add(path, "ldconfig")

    def scan_process(self, pid: int) -> list[CudaLibrary]:
        added = []
        for path, key in libraries_in_maps(pid):
            # Unmatched (an overlay file system may report another device): the process's own root reaches it.
            reached = reachable_path(pid, path, key) or f"/proc/{pid}/root{path}"
            lib = self.add(reached, f"pid {pid}")
            if lib:
                added.append(lib)
        return added

    def scan_command(self, argv: list[str], env: dict[str, str]) -> None:
        """Libraries a command about to be launched would find: its env and rpath."""
        exe = argv[0]
        if "/" not in exe:
            for d in env.get("PATH", os.defpath).split(":"):
                cand = os.path.join(d, exe)
                if os.access(cand, os.X_OK):
                    exe = cand
                    break
        self.add_dirs((d, "rpath") for d in _rpath_dirs(exe))
        self.scan_system(env)

    def scan_all_processes(self) -> None:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                self.scan_process(int(entry))

    def add_mapped(self, path: str, found_via: str) -> tuple[CudaLibrary | None, bool]:
        """A library file a process has mapped: (the library, whether it is new).

        ``path`` may reach the file through ``/proc/PID/root`` (another mount
        namespace), so it is not resolved further; a copy already known by its
        inode is returned as it is. None when the file is not one gpuscope probes.
        """
        return self._library_at(path, library_kind(path), found_via, (path,))

    def _library_at(
        self, path: str, kind: str | None, found_via: str, named: tuple[str, ...]
    ) -> tuple[CudaLibrary | None, bool]:
        """The library at ``path`` as it is (not resolved): (known or new library, whether new), or (None, False).

        ``named``: the paths whose names may carry the version (the first that does).
        """
        try:
            st = os.stat(path)
        except OSError:
            return None, False
        key = (st.st_dev, st.st_ino)
        if key in self._libs:
            return self._libs[key], False
        try:
            if kind is None or not probe_plan(path):
                return None, False
        except (ElfError, OSError):
            return None, False
        version = next((v for v in map(_version_of, named) if v), "")
        lib = CudaLibrary(path, kind, version, found_via, key)
        self._libs[key] = lib
        return lib, True
