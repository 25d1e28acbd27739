"""Reading a process's facts from /proc: a live one, a kernel thread, and one that has exited but is not reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpuscope.agent.procinfo import read_process


def test_a_live_process_is_described_with_its_program() -> None:
    # (read once it says it runs: between fork and exec /proc shows a half-made process)
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        info = read_process(child.pid)
        assert info is not None and not info.exited
        assert info.exe == os.path.realpath(sys.executable)
        assert "time.sleep(30)" in info.cmdline
    finally:
        child.kill()
        child.wait(timeout=10)


def test_an_exited_process_not_yet_reaped_reads_as_exited() -> None:
    # given a child that has exited while its parent has not collected it (a zombie: its name stays, its program goes)
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        # then it reads as exited (the session keeps an earlier look's description), with its name still
        info = read_process(child.pid)
        assert info is not None and info.exited and info.comm == "true" and info.exe == ""
    finally:
        child.wait(timeout=10)
    assert read_process(child.pid) is None


def test_a_kernel_thread_is_described_without_a_program() -> None:
    try:
        with open("/proc/2/comm") as f:
            if f.read().strip() != "kthreadd":
                pytest.skip("no kernel thread visible here (a PID namespace)")
    except OSError:
        pytest.skip("no kernel thread visible here (a PID namespace)")
    info = read_process(2)
    assert info is not None and info.comm == "kthreadd" and info.exe == "" and not info.exited
