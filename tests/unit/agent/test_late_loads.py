"""The late-load watcher: finding the mapped file, and letting held processes go whatever happens."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gpuscope.agent.discovery import Discovery
from gpuscope.agent.late_loads import LateLoads, mapped_file
from gpuscope.agent.tracer import LibState, kernel_file_key
from gpuscope.bpf.wire import LOAD_EVENT_DTYPE, HoldKind


class FakeTracer:
    """Records what the watcher asks of the kernel side."""

    def __init__(self, fail_attach: bool = False, may_signal: bool = True) -> None:
        self.released: list[int] = []
        self.may_signal = may_signal
        self.marked: list[tuple[tuple[int, int], LibState]] = []
        self.attached: list[str] = []
        self.fail_attach = fail_attach

    def release(self, pid: int) -> bool:
        self.released.append(pid)
        return self.may_signal

    def mark_library(self, key: tuple[int, int], state: LibState) -> None:
        self.marked.append((key, state))

    def attach_library(self, lib) -> None:
        if self.fail_attach:
            raise OSError("attach failed")
        self.attached.append(lib.path)


def load_event(pid: int, fd: int, key: tuple[int, int], held: HoldKind, name: str = "libcudart.so.12") -> np.ndarray:
    ev = np.zeros(1, dtype=LOAD_EVENT_DTYPE)
    ev["pid"], ev["fd"], ev["dev"], ev["ino"], ev["held"] = pid, fd, key[0], key[1], int(held)
    ev["ts_ns"] = 0
    ev["name"] = name.encode()
    return ev


def test_the_mapped_file_is_found_through_the_descriptor_and_checked_against_the_kernel_key(tmp_path: Path) -> None:
    # given a file this process holds open
    lib = tmp_path / "libcudart.so.12"
    lib.write_bytes(b"\0" * 64)
    with open(lib, "rb") as f:
        key = kernel_file_key(os.stat(lib))
        # then the descriptor leads to it, and a key of another file leads nowhere
        assert mapped_file(os.getpid(), f.fileno(), key) == str(lib)
        assert mapped_file(os.getpid(), f.fileno(), (key[0], key[1] + 1)) is None


def test_a_held_process_is_let_go_when_attaching_fails(standin, tmp_path: Path) -> None:
    # given a library the process holds open, and attaching that fails
    tracer = FakeTracer(fail_attach=True)
    watcher = LateLoads(tracer, Discovery())  # type: ignore[arg-type]
    with open(standin.cudart, "rb") as f:
        key = kernel_file_key(os.stat(standin.cudart))
        # when the kernel reports a held process mapping it
        watcher.handle(load_event(os.getpid(), f.fileno(), key, HoldKind.STOPPED))
    # then the process is released all the same, and the failure is kept
    assert tracer.released == [os.getpid()]
    assert len(watcher.errors) == 1 and "attach failed" in watcher.errors[0]
    assert [ll.attached for ll in watcher.loads] == [False]


def test_a_file_that_cannot_be_found_is_marked_so_that_nobody_is_held_for_it_again() -> None:
    # given a report from a process that is gone
    tracer = FakeTracer()
    watcher = LateLoads(tracer, Discovery())  # type: ignore[arg-type]
    gone = (0x800001, 4242)
    watcher.handle(load_event(2**22 + 17, 3, gone, HoldKind.STOPPED))
    # then its key is marked not probed, and the (gone) pid is released
    assert tracer.marked == [(gone, LibState.NOT_PROBED)]
    assert tracer.released == [2**22 + 17]
    assert watcher.loads[0].path == "libcudart.so.12"


def test_a_found_library_is_attached_and_both_keys_are_marked(standin, tmp_path: Path) -> None:
    tracer = FakeTracer()
    watcher = LateLoads(tracer, Discovery())  # type: ignore[arg-type]
    with open(standin.cudart, "rb") as f:
        key = kernel_file_key(os.stat(standin.cudart))
        # when a process that was not held maps it (a debugger's or a shell job's)
        watcher.handle(load_event(os.getpid(), f.fileno(), key, HoldKind.VISIBLE))
    # then its probes are attached, the kernel's key is marked, and nothing is released
    assert tracer.attached == [str(standin.cudart)]
    assert tracer.marked == [(key, LibState.PROBED)]
    assert tracer.released == []
    assert watcher.loads[0].held is HoldKind.VISIBLE and watcher.loads[0].attached


def test_a_held_process_this_agent_may_not_signal_is_reported_and_the_watcher_goes_on(standin) -> None:
    # given an agent without CAP_KILL for the held process (SIGCONT refused)
    tracer = FakeTracer(may_signal=False)
    watcher = LateLoads(tracer, Discovery())  # type: ignore[arg-type]
    with open(standin.cudart, "rb") as f:
        key = kernel_file_key(os.stat(standin.cudart))
        # when two loads are reported
        watcher.handle(load_event(os.getpid(), f.fileno(), key, HoldKind.STOPPED))
        watcher.handle(load_event(os.getpid(), f.fileno(), key, HoldKind.STOPPED))
    # then both were handled (the hold removed each time) and both are reported as not resumed
    assert tracer.released == [os.getpid(), os.getpid()]
    assert watcher.not_resumed == [os.getpid(), os.getpid()]
    assert len(watcher.loads) == 2 and watcher.errors == []
