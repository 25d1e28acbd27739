"""A Python registered by its file: the runtime's distance from the entry point, checked on a live process."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscope.stacks.python import find_interpreter, python_executable

AT_ENTRY = 9


def _static_python() -> str:
    for candidate in (sys.executable, "/usr/bin/python3"):
        path = os.path.realpath(candidate)
        if python_executable(path) is not None:
            return path
    pytest.fail("no Python with its runtime in the executable here (Debian's python3 is one: make setup)")
    raise AssertionError


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
        interp = None
        for _ in range(100):
            interp = find_interpreter(proc.pid)
            if interp is not None:
                break
            time.sleep(0.02)
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
