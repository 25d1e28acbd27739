"""Python builds registered by their file, so that a process has Python frames from its first call.

User space finds a process's runtime in its maps, which on a loaded machine may be read after a short
script has made its calls and exited. So the interpreter is registered with the kernel by its file, before
the processes that run it start (the command ``trace`` launches, each program exec'd, each runtime seen):

- a build with its runtime in the executable (Debian's ``python3``, conda, a default pyenv build): the
  runtime lies at a fixed distance from the entry point, which the kernel tells each process (AT_ENTRY);
- a build with its runtime in ``libpython3.X.so`` (``--enable-shared``: Fedora, RHEL, pyenv's shared
  builds): ld.so maps the library anywhere, so a probe on the library's start functions (``Py_BytesMain``
  for ``python3``, ``Py_InitializeFromConfig`` and its kin for a program that embeds Python) registers
  each process as it starts, from the address it hit.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from gpuscope.platform.elf import DT_NEEDED, ElfError, ElfFile
from gpuscope.platform.proc_root import kernel_file_key
from gpuscope.stacks.python import LAYOUTS, PyLayout, code_type_of, layout_from_debug_offsets, version_of
from gpuscope.stacks.symbols import find_symbols

# Entered once as a process starts Python: by python3's main, or by a program that embeds it. Each is
# entered from outside the library (so never inlined away), and the first one hit registers the process.
START_SYMBOLS = ("Py_BytesMain", "Py_Main", "Py_InitializeFromConfig", "Py_InitializeEx", "Py_Initialize")
# Where ld.so looks after the file's own search path (its cache aside: these are what the cache lists).
SYSTEM_LIBRARY_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/usr/local/lib")


def _layout(elf: ElfFile, version: tuple[int, int, int], runtime: int) -> PyLayout | None:
    layout = LAYOUTS.get(version[1])
    if version[1] >= 13:
        # The debug offsets are _PyRuntime's initial value: in the file's data, as in the process.
        off = elf.vaddr_to_offset(runtime)
        raw = elf.read(off, 8 * 44) if off is not None else None
        layout = layout_from_debug_offsets(raw, version[1]) or layout
    return layout


@dataclass(frozen=True, slots=True)
class PythonExecutable:
    """A Python build with its runtime in the executable itself, read from the file (no process needed).

    ``runtime_from_entry`` is _PyRuntime's distance from the entry point, which the kernel tells each
    process (AT_ENTRY) wherever it loads it.
    """

    path: str
    ino: int
    dev: int
    version: tuple[int, int, int]
    runtime_from_entry: int
    layout: PyLayout
    code_type: int = 0  # PyCode_Type - _PyRuntime (0: unknown)


def python_executable(path: str) -> PythonExecutable | None:
    """The Python runtime built into the executable at ``path``; None for another program or a libpython build."""
    if "python" not in os.path.basename(path):
        return None
    try:
        st = os.stat(path)
        with ElfFile(path) as elf:
            syms = find_symbols(elf, ("_PyRuntime", "Py_Version", "PyCode_Type"))
            if "_PyRuntime" not in syms:
                return None  # the runtime is in libpython: see python_library
            version = version_of(elf, path, syms)
            if version is None:
                return None
            layout = _layout(elf, version, syms["_PyRuntime"])
            entry = elf.entry
    except (ElfError, OSError, IndexError, ValueError, struct.error):
        return None
    if layout is None or not entry:
        return None
    return PythonExecutable(
        path, st.st_ino, kernel_file_key(st)[0], version, syms["_PyRuntime"] - entry, layout, code_type_of(syms)
    )


@dataclass(frozen=True, slots=True)
class PythonLibrary:
    """A ``libpython3.X.so`` read from its file: where its runtime and its start functions are.

    ``runtime``: _PyRuntime's address in the file. ``starts``: (address in the file, file offset) of each
    start function found, all in one segment, whose address minus file offset is ``text_delta``.
    """

    path: str
    ino: int
    dev: int
    version: tuple[int, int, int]
    runtime: int
    text_delta: int
    starts: tuple[tuple[int, int], ...]
    layout: PyLayout
    code_type: int = 0  # PyCode_Type - _PyRuntime (0: unknown)


def python_library(path: str) -> PythonLibrary | None:
    """The libpython at ``path``; None for another file, an unknown version or one without a start to probe."""
    if not os.path.basename(path).startswith("libpython3"):
        return None
    try:
        st = os.stat(path)
        with ElfFile(path) as elf:
            syms = find_symbols(elf, ("_PyRuntime", "Py_Version", "PyCode_Type", *START_SYMBOLS))
            runtime = syms.get("_PyRuntime")
            version = version_of(elf, path, syms) if runtime else None
            if runtime is None or version is None:
                return None
            layout = _layout(elf, version, runtime)
            located = [(syms[n], elf.vaddr_to_offset(syms[n])) for n in START_SYMBOLS if n in syms]
    except (ElfError, OSError, IndexError, ValueError, struct.error):
        return None
    starts = [(vaddr, off) for vaddr, off in located if off is not None]
    if layout is None or not starts:
        return None
    delta = starts[0][0] - starts[0][1]
    same = tuple((vaddr, off) for vaddr, off in starts if vaddr - off == delta)
    return PythonLibrary(
        path, st.st_ino, kernel_file_key(st)[0], version, runtime, delta, same, layout, code_type_of(syms)
    )


def libpython_of(executable: str, env: Mapping[str, str] | None = None) -> str | None:
    """The libpython ``executable`` will load (its DT_NEEDED, found as ld.so finds it), or None.

    ``env``: the environment it will run with (its LD_LIBRARY_PATH); default: ours.
    """
    try:
        with ElfFile(executable) as elf:
            needed = [n for n in elf.dynamic().get(DT_NEEDED, []) if n.startswith("libpython3")]
            if not needed:
                return None
            origin = os.path.dirname(os.path.realpath(executable))
            dirs = elf.search_path(origin, (env if env is not None else os.environ).get("LD_LIBRARY_PATH", ""))
    except (ElfError, OSError, IndexError, ValueError, struct.error):
        return None
    for d in [*dirs, *SYSTEM_LIBRARY_DIRS]:
        candidate = os.path.join(d, needed[0])
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None
