"""A Python registered by its file: the runtime's distance from the entry point, checked on a live process."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from gpuscope.stacks.python import Interpreter, find_interpreter
from gpuscope.stacks.python_files import libpython_of, python_executable, python_library

AT_ENTRY = 9


def _static_python() -> str:
    for candidate in (sys.executable, "/usr/bin/python3"):
        path = os.path.realpath(candidate)
        if python_executable(path) is not None:
            return path
    pytest.fail("no Python with its runtime in the executable here (Debian's python3 is one: make setup)")
    raise AssertionError


def _interpreter_of(pid: int) -> Interpreter | None:
    """The interpreter of a Python just started, once its maps show it (within 2 s)."""
    for _ in range(100):
        interp = find_interpreter(pid)
        if interp is not None:
            return interp
        time.sleep(0.02)
    return None


def _auxv_entry(pid: int) -> int:
    raw = Path(f"/proc/{pid}/auxv").read_bytes()
    pairs = struct.iter_unpack("<QQ", raw)
    return next(value for key, value in pairs if key == AT_ENTRY)


def test_the_runtime_of_a_running_python_is_its_entry_point_plus_the_registered_distance() -> None:
    # given a Python built with its runtime in the executable, registered by its file
    path = _static_python()
    exe = python_executable(path)
    assert exe is not None
    st = os.stat(path)
    assert (exe.ino, exe.dev) == (st.st_ino, (os.major(st.st_dev) << 20) | os.minor(st.st_dev))
    # when it runs (loaded wherever ASLR puts it)
    proc = subprocess.Popen([path, "-c", "import time; time.sleep(30)"])
    try:
        interp = _interpreter_of(proc.pid)
        assert interp is not None
        # then the kernel's AT_ENTRY for it plus the distance is where its maps say _PyRuntime is
        assert _auxv_entry(proc.pid) + exe.runtime_from_entry == interp.runtime
        assert exe.layout == interp.layout and exe.version == interp.version
    finally:
        proc.kill()
        proc.wait()


def test_other_programs_are_not_registered_by_file(tmp_path: Path) -> None:
    assert python_executable("/bin/sh") is None
    fake = tmp_path / "python3.11"
    fake.write_text("#!/bin/sh\n")
    assert python_executable(str(fake)) is None  # named like one, but not an ELF file
    assert python_executable(str(tmp_path / "python3-missing")) is None


WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"


def _system_libpython() -> Path:
    probe = "import sysconfig as s; print(s.get_config_var('LIBDIR'), s.get_config_var('INSTSONAME'))"
    libdir, soname = subprocess.run(
        ["/usr/bin/python3", "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    path = Path(libdir) / soname
    if not path.is_file():
        pytest.fail(f"no {path}: apt-get install libpython3-dev (make setup installs it)")
    return path


def _shared_python(out: Path, lib: Path, *rpath: str) -> Path:
    """A python3 whose runtime is in ``lib`` (as Fedora's and pyenv's shared builds are)."""
    exe = out / "python3-shared"
    flags = [f"-Wl,-rpath,{r}" for r in rpath]
    src = str(WORKLOADS / "python_shared.c")
    subprocess.run(["cc", "-o", str(exe), src, f"-L{lib.parent}", f"-l:{lib.name}", *flags], check=True)
    return exe


def _mapping_of(pid: int, addr: int) -> tuple[int, int, int]:
    """(start, file offset, inode) of the mapping of ``pid`` that holds ``addr``."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= addr < hi:
            return lo, int(parts[2], 16), int(parts[4])
    raise AssertionError(f"{addr:#x} not mapped")


def test_a_libpython_is_read_from_its_file_and_its_start_probes_give_the_runtime_of_a_running_process(
    tmp_path: Path,
) -> None:
    # given the system's libpython, read from its file
    lib_path = _system_libpython()
    lib = python_library(str(lib_path))
    assert lib is not None and lib.starts
    assert lib.ino == os.stat(lib_path).st_ino
    assert python_library("/bin/sh") is None and python_executable(str(lib_path)) is None
    # when a python3 built on it runs, loaded wherever ld.so puts it
    exe = _shared_python(tmp_path, lib_path)
    assert libpython_of(str(exe)) == os.path.realpath(lib_path)
    proc = subprocess.Popen([str(exe), "-c", "import time; time.sleep(30)"])
    try:
        interp = _interpreter_of(proc.pid)
        assert interp is not None and interp.layout == lib.layout and interp.version == lib.version
        bias = interp.runtime - lib.runtime
        # then every start function's address in the process lies in the library's file at the offset the
        # probe is attached to, which is its address less text_delta: the check the kernel makes before it
        # takes the address it hit, less the symbol's, as the load bias
        for vaddr, offset in lib.starts:
            start, pgoff, ino = _mapping_of(proc.pid, bias + vaddr)
            assert ino == lib.ino
            assert bias + vaddr - start + pgoff == offset == vaddr - lib.text_delta
    finally:
        proc.kill()
        proc.wait()


def test_the_libpython_of_an_executable_is_found_as_ld_so_finds_it(tmp_path: Path) -> None:
    # given a copy of the system's libpython beside an executable that names it through $ORIGIN
    system = _system_libpython()
    (tmp_path / "lib").mkdir()
    (tmp_path / "bin").mkdir()
    copy = tmp_path / "lib" / system.name
    copy.write_bytes(system.read_bytes())
    exe = _shared_python(tmp_path / "bin", copy, "$ORIGIN/../lib")
    # then its RUNPATH finds the copy, LD_LIBRARY_PATH comes before it, and other programs have none
    assert libpython_of(str(exe), env={}) == str(copy)
    other = tmp_path / "other"
    other.mkdir()
    (other / system.name).symlink_to(system)
    assert libpython_of(str(exe), env={"LD_LIBRARY_PATH": str(other)}) == os.path.realpath(system)
    assert libpython_of("/bin/sh") is None
    assert libpython_of(str(tmp_path / "missing")) is None


def test_the_code_type_of_a_running_python_lies_at_the_registered_distance_from_its_runtime() -> None:
    # given this very process's interpreter, located from its maps
    interp = find_interpreter(os.getpid())
    assert interp is not None and interp.code_type != 0
    # then PyCode_Type (what the kernel compares a frame's code object's type with) is its runtime plus the distance
    assert interp.runtime + interp.code_type == id(types.CodeType)
    # and reading the file alone gives the same distance
    exe = python_executable(os.path.realpath(sys.executable))
    lib = python_library(interp.path)
    assert interp.code_type == (exe or lib).code_type  # type: ignore[union-attr]
