"""Calls that name their call site get the site's last full stack: at once, or once the stack ring has been read past it."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gpuscope.bpf.wire import EVENT_DTYPE, STACK_HEADER_DTYPE
from gpuscope.stacks import collector as collector_mod
from gpuscope.stacks.collector import StackCollector
from gpuscope.stacks.python_files import PythonLibrary
from gpuscope.store.stacks_write import insert_event_stacks, insert_stacks

PID = os.getpid()


class Tracer:
    def set_python_offsets(self, version: int, packed: bytes) -> None: ...

    def set_python_process(self, pid: int, runtime: int, version: int, code_type: int = 0) -> None: ...

    def clear_python_process(self, pid: int) -> None: ...

    def set_python_exe(self, ino: int, dev: int, runtime_from_entry: int, version: int, code_type: int = 0) -> None: ...

    def attach_python_library(self, lib: PythonLibrary, version: int) -> bool:
        return False


class Writes:
    """The writer: remembers each named write."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, tuple[Any, ...]]] = []

    def write(self, fn: Any, /, *args: Any, **kwargs: Any) -> None:
        self.calls.append((fn, args))

    def links(self) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for fn, args in self.calls:
            if fn is insert_event_stacks:
                out += [tuple(r) for r in args[0]]
        return out

    def stacks(self) -> list[int]:
        return [row[0] for fn, args in self.calls if fn is insert_stacks for row in args[0]]


def full_stack(site: int, ts_ns: int, tid: int = 11) -> bytes:
    h = np.zeros(1, dtype=STACK_HEADER_DTYPE)
    h["ts_ns"], h["pid"], h["tid"], h["op"], h["site"] = ts_ns, PID, tid, 3, site
    return h.tobytes()


def calls(*sites: int, tid: int = 11) -> np.ndarray:
    ev = np.zeros(len(sites), dtype=EVENT_DTYPE)
    ev["pid"], ev["tid"], ev["site"] = PID, tid, sites
    ev["ts_ns"] = np.arange(len(sites)) * 100 + 5_000
    return ev


def test_calls_at_a_site_are_linked_to_its_full_stack_and_calls_without_a_site_are_not() -> None:
    # given a site whose full stack was read, and stored calls at it and at no site
    col = StackCollector(1, Tracer(), python=False)
    out = Writes()
    col.drain([full_stack(site=3, ts_ns=1_000)], out)
    (h,) = out.stacks()
    # when the calls are stored
    hashes = col.stack_hashes(calls(3, 0, 3))
    col.link(out)
    # then both calls at the site have its stack, to store with them; the call at no site has none
    assert hashes is not None and hashes.tolist() == [h, 0, h]
    # and the full stack's own call was linked by its record; nothing waits
    assert out.links() == [(1, PID, 11, 1_000, h)]
    assert col.unattributed == 0


def test_a_call_whose_site_stack_comes_later_waits_for_it_and_one_that_never_comes_is_counted() -> None:
    # given calls at two sites whose full stacks have not been read
    col = StackCollector(1, Tracer(), python=False)
    out = Writes()
    hashes = col.stack_hashes(calls(4, 5))
    assert hashes is not None and hashes.tolist() == [0, 0]
    col.link(out)
    assert out.links() == []
    # when site 4's stack arrives, and the session ends without site 5's
    col.drain([full_stack(site=4, ts_ns=4_000)], out)
    (h,) = out.stacks()
    col.link(out)
    col.link(out, final=True)
    # then the call at site 4 is linked, and the one at site 5 is counted as unattributed
    assert sorted(out.links()) == [(1, PID, 11, 4_000, h), (1, PID, 11, 5_000, h)]
    assert col.unattributed == 1


def test_a_call_waits_for_its_site_stack_only_so_long(monkeypatch) -> None:
    # given a call at a site whose stack never arrives
    col = StackCollector(1, Tracer(), python=False)
    out = Writes()
    hashes = col.stack_hashes(calls(9))
    assert hashes is not None and hashes.tolist() == [0]
    # when more than LINK_WAIT_S passes
    monkeypatch.setattr(collector_mod, "LINK_WAIT_S", 0.0)
    col.link(out)
    # then it is given up on
    assert col.unattributed == 1 and out.links() == []
