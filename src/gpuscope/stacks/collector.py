"""The session's side of stacks: learn processes and files, resolve records, queue rows.

Runs on the collector thread. Rows go to the writer thread like everything
else: each distinct stack once (``insert_stacks``). A call that only names
its site (most calls, see gpuscope.stacks.policy) gets the site's last full
stack, read from the stack ring before the call's event: its hash goes on
the call's own row (``stack_hashes``, handed to the writer with the batch).
A call with a full stack is linked by its record (``insert_event_stacks``),
and so is a call whose site's stack came later (``link``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Concatenate, ParamSpec, Protocol

import numpy as np

from gpuscope.bpf.wire import PY_CODE_UNDESCRIBED, STACK_OP_CPU_SAMPLE
from gpuscope.platform.proc_root import kernel_file_key
from gpuscope.stacks.python import LAYOUTS, PyLayout, find_interpreter, sanity_check
from gpuscope.stacks.python_files import (
    PythonExecutable,
    PythonLibrary,
    libpython_of,
    python_executable,
    python_library,
)
from gpuscope.stacks.records import CodeRecord, RawStack, decode
from gpuscope.stacks.resolve import StackResolver
from gpuscope.store.cpu_samples import CpuSampleRow, insert_cpu_samples
from gpuscope.store.stacks_write import EventStackRow, StackRow, insert_event_stacks, insert_stacks

P = ParamSpec("P")
# A process that looks like Python but has not mapped its runtime yet (just
# exec'd) is looked at again on every drain for this long.
PYTHON_LOOKUP_S = 3.0
PYTHON_RECHECK_S = 1.0
_MAX_CACHED = 200_000
# A call whose site's full stack has not been read yet waits this long for it
# (the stack ring is read 2,048 records a poll) before it counts as unattributed.
LINK_WAIT_S = 2.0
# Sites are packed with their pid into one integer key: pids stay below 2**22.
_SITE_BITS = 42
# What a call waiting for its site's stack keeps.
_CALL_DTYPE = np.dtype([("pid", "<i8"), ("tid", "<i8"), ("ts_ns", "<i8"), ("site", "<u8")])


class Writer(Protocol):
    """Where rows go: ``gpuscope.store.writer.EventWriter`` runs each named write on its thread."""

    def write(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None: ...


class PythonTracer(Protocol):
    def set_python_offsets(self, version: int, packed: bytes) -> None: ...

    def set_python_process(self, pid: int, runtime: int, version: int, code_type: int = 0) -> None: ...

    def clear_python_process(self, pid: int) -> None: ...

    def set_python_exe(self, ino: int, dev: int, runtime_from_entry: int, version: int, code_type: int = 0) -> None: ...

    def attach_python_library(self, lib: PythonLibrary, version: int) -> bool: ...


class StackCollector:
    """Resolve stack records as they arrive; remember enough to name frames after processes exit."""

    def __init__(
        self, session_id: int, tracer: PythonTracer, *, python: bool = True, resolver: StackResolver | None = None
    ) -> None:
        self.session_id = session_id
        self.tracer = tracer
        self.python = python
        self.resolver = resolver or StackResolver()
        self.records = 0
        # On-CPU samples stored, per process, since the trace started (their cost is part of the self-cost).
        self.cpu_samples: dict[int, int] = {}
        self._by_key: dict[bytes, int] = {}
        # (pid, site id) -> the stack hash of the site's last full stack
        self._by_site: dict[tuple[int, int], int] = {}
        # stored calls whose site's full stack never arrived (its record was lost)
        self.unattributed = 0
        # (first seen, calls) that name a site not resolved yet: pid, tid, ts_ns, site
        self._unlinked: list[tuple[float, np.ndarray]] = []
        self._stored: set[int] = set()
        self._python_pending: dict[int, float] = {}
        self._python_done: set[int] = set()
        # Until when a runtime whose thread list did not read as sane is looked at again (per process).
        self._python_insane_until: dict[int, float] = {}
        # When each process not registered as Python was last looked at again for its runtime.
        self._python_rechecked: dict[int, float] = {}
        self._registered: dict[int, int] = {}
        # Python builds registered by file ((ino, dev) -> it): their processes' frames are walked from the
        # first call, before each process is registered here (a short script may be gone by then).
        self._python_exes: dict[tuple[int, int], PythonExecutable] = {}
        self._python_libs: dict[tuple[int, int], PythonLibrary | None] = {}  # by kernel_file_key
        # gpuscope's own libraries (libc, ld.so, libstdc++, ...) are what most
        # workloads map too: index them now, for processes that exit unseen.
        self.resolver.files.add_process(os.getpid())

    # -- learning ----------------------------------------------------------------

    def note_library(self, path: str) -> None:
        self.resolver.files.add_path(path)

    def note_exec(self, pid: int, argv0: str) -> None:
        """An exec'd program: index its executable (the process may be gone before /proc is read)."""
        if argv0.startswith("/") and os.path.isfile(argv0):
            self.resolver.files.add_path(argv0)
            self.note_executable(argv0)
        self.note_process(pid, refresh=True)

    def hold_python(self, pid: int) -> None:
        """A launcher about to exec the job: not registered for Python walks (its exec re-registers the pid).

        Registered, its runtime would outlive the exec in ``py_procs`` until the
        exec is handled here, and the job's first stacks would be walked with it.
        """
        if self.python and pid not in self._registered:
            self._python_done.add(pid)

    def note_executable(self, path: str, env: Mapping[str, str] | None = None) -> None:
        """Register a Python build by file, so that every process running it has Python frames at once.

        For the command trace launches (before it runs, ``env`` its environment) and each program exec'd:
        its runtime in the executable itself, or in the libpython it loads.
        """
        if not self.python:
            return
        exe = python_executable(path)
        if exe is None:
            lib = libpython_of(path, env)
            if lib is not None:
                self.note_python_library(lib)
            return
        if (exe.ino, exe.dev) in self._python_exes:
            return
        slot = self._load_layout(exe.layout)
        self.tracer.set_python_exe(exe.ino, exe.dev, exe.runtime_from_entry, slot, exe.code_type)
        self._python_exes[(exe.ino, exe.dev)] = exe

    def note_python_library(self, path: str) -> None:
        """Register a libpython by file: each process that starts it from here on is registered as it starts."""
        try:
            st = os.stat(path)
        except OSError:
            return
        key = kernel_file_key(st)
        if key in self._python_libs:
            return
        lib = python_library(path)
        self._python_libs[key] = lib  # None too: a file that is no libpython is read once
        if lib is not None and not self.tracer.attach_python_library(lib, lib.layout.slot):
            self._python_libs[key] = None
        elif lib is not None:
            self._load_layout(lib.layout)

    def _load_layout(self, lay: PyLayout) -> int:
        """Give the kernel (and the resolver, for frames of processes gone) the offsets of ``lay``; its slot."""
        if self.resolver.layouts.get(lay.slot) != lay:
            self.tracer.set_python_offsets(lay.slot, lay.pack())
            self.resolver.layouts[lay.slot] = lay
        return lay.slot

    def note_process(self, pid: int, refresh: bool = False) -> None:
        """Index a live process's files; find its Python runtime for the in-kernel walk."""
        if refresh:
            self._python_done.discard(pid)
            self._python_insane_until.pop(pid, None)
        maps = self.resolver.files.add_process(pid)
        if not self.python or pid in self._python_done or not maps:
            return
        interp = find_interpreter(pid, maps)
        if pid in self._registered and (interp is None or interp.runtime != self._registered[pid]):
            # exec'd another program: the old runtime address means nothing now
            if interp is not None:
                self.tracer.clear_python_process(pid)
            self.resolver.interpreters.pop(pid, None)
            del self._registered[pid]
        if interp is None:
            # Another program now: the kernel dropped its entry at the exec (a stale one would walk the old
            # runtime's addresses); one the start of a registered libpython wrote since is the new program's.
            exe = os.path.basename(maps[0].path) if maps else ""
            if "python" in exe:
                self._python_pending.setdefault(pid, time.monotonic() + PYTHON_LOOKUP_S)
            return
        lay = interp.layout
        sane = lay.minor >= 0 and sanity_check(interp)
        if not sane and lay.minor >= 0:
            # A thread list read mid-way through the interpreter's start-up (an on-CPU sample can come that
            # early): look again, for a while, before calling the layout unknown.
            now = time.monotonic()
            until = self._python_insane_until.setdefault(pid, now + PYTHON_LOOKUP_S)
            if now < until:
                self._python_pending[pid] = until
                return
        self._python_pending.pop(pid, None)
        self._python_done.add(pid)
        if not sane:
            # Known interpreter, unknown layout: register it with an empty
            # slot so its events say why they have no Python frames.
            self.tracer.set_python_process(pid, interp.runtime, len(LAYOUTS) + 1)
            self._registered[pid] = interp.runtime
            return
        self.resolver.interpreters[pid] = interp
        self.tracer.set_python_process(pid, interp.runtime, self._load_layout(lay), interp.code_type)
        self._registered[pid] = interp.runtime
        if os.path.basename(interp.path).startswith("libpython3"):
            # The next processes that start it (workers it spawns, the next run) register as they start.
            self.note_python_library(interp.path)

    def _python_unknown(self, pid: int) -> bool:
        """Whether to look at a process again for a Python runtime (never registered, not waiting already)."""
        if not self.python or pid in self._python_done or pid in self._python_pending:
            return False
        now = time.monotonic()
        if now - self._python_rechecked.get(pid, 0.0) < PYTHON_RECHECK_S:
            return False
        if len(self._python_rechecked) > _MAX_CACHED:
            self._python_rechecked.clear()
        self._python_rechecked[pid] = now
        try:
            return "python" in os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            return False  # exited: nothing left to look at

    def _retry_python(self) -> None:
        now = time.monotonic()
        for pid, deadline in list(self._python_pending.items()):
            if now > deadline:
                del self._python_pending[pid]
            else:
                self.note_process(pid)

    # -- records -----------------------------------------------------------------

    def drain(self, bodies: list[bytes], writer: Writer) -> int:
        """Resolve a batch of raw records and queue their rows; return how many were read."""
        if self._python_pending:
            self._retry_python()
        if not bodies:
            return 0
        new_stacks: list[StackRow] = []
        links: list[EventStackRow] = []
        samples: list[CpuSampleRow] = []
        for body in bodies:
            raw = decode(body)
            if raw is None:
                continue
            if isinstance(raw, CodeRecord):
                # Ahead of the stacks that show it: cache it before they resolve. A new object at an address
                # seen before: the stacks resolved with the old one are resolved again when they come.
                if self.resolver.note_code(raw):
                    self._by_key.clear()
                continue
            if raw.window and not self.resolver.files.has_maps(raw.pid):
                self.note_process(raw.pid)
            elif raw.op != STACK_OP_CPU_SAMPLE and self._python_unknown(raw.pid):
                # A call made by a process whose runtime was not found yet: its first on-CPU samples may
                # have come while the interpreter was still starting (on a loaded machine, for longer than
                # the lookup waits). Look again, at most once a second.
                self.note_process(raw.pid)
            key = raw.key + self.resolver.scan_key(raw)
            h = self._by_key.get(key)
            if h is None:
                h = self._resolve(raw, new_stacks)
                if len(self._by_key) > _MAX_CACHED:
                    self._by_key.clear()
                if not any(code & PY_CODE_UNDESCRIBED for code, _ in raw.python):
                    # (one with a frame whose description was lost is named from the live process: not for later)
                    self._by_key[key] = h
            if raw.site:
                if len(self._by_site) > _MAX_CACHED:
                    self._by_site.clear()
                self._by_site[(raw.pid, raw.site)] = h
            if raw.op == STACK_OP_CPU_SAMPLE:
                samples.append((self.session_id, raw.pid, raw.tid, raw.ts_ns, h))
                self.cpu_samples[raw.pid] = self.cpu_samples.get(raw.pid, 0) + 1
                continue
            links.append((self.session_id, raw.pid, raw.tid, raw.ts_ns, h))
        if new_stacks:
            writer.write(insert_stacks, new_stacks)
        if samples:
            writer.write(insert_cpu_samples, samples)
        writer.write(insert_event_stacks, links)
        self.records += len(links)
        return len(bodies)

    def stack_hashes(self, ev: np.ndarray) -> np.ndarray | None:
        """The stack hash of each stored call (EVENT_DTYPE) that names its site, 0 for the others; None if none does.

        Known for the sites whose full stack has been read; the calls at the
        others (their site's stack is further down the stack ring) wait for ``link``.
        """
        named = np.flatnonzero(ev["site"] != 0)
        if not len(named):
            return None
        calls = np.empty(len(named), dtype=_CALL_DTYPE)
        for name in _CALL_DTYPE.names or ():
            calls[name] = ev[name][named]
        hashes, ok = self._site_hashes(calls)
        if not ok.all():
            self._unlinked.append((time.monotonic(), calls[~ok]))
        out = np.zeros(len(ev), dtype=np.int64)
        out[named[ok]] = hashes[ok]
        self.records += int(ok.sum())
        return out

    def link(self, writer: Writer, *, final: bool = False) -> None:
        """Link the calls still waiting for their site's stack; give up on them after a while (all, if final)."""
        if not self._unlinked:
            return
        now = time.monotonic()
        waiting: list[tuple[float, np.ndarray]] = []
        for seen, calls in self._unlinked:
            hashes, ok = self._site_hashes(calls)
            if ok.any():
                linked = calls[ok]
                rows = zip(
                    linked["pid"].tolist(),
                    linked["tid"].tolist(),
                    linked["ts_ns"].tolist(),
                    hashes[ok].tolist(),
                    strict=True,
                )
                writer.write(insert_event_stacks, [(self.session_id, *row) for row in rows])
                self.records += len(linked)
            rest = calls[~ok]
            if len(rest):
                if final or now - seen > LINK_WAIT_S:
                    self.unattributed += len(rest)
                else:
                    waiting.append((seen, rest))
        self._unlinked = waiting

    def _site_hashes(self, calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the stack hash of each call's site, whether its site's stack is known)."""
        key = (calls["pid"].astype(np.uint64) << np.uint64(_SITE_BITS)) | (
            calls["site"] & np.uint64((1 << _SITE_BITS) - 1)
        )
        uniq, inverse = np.unique(key, return_inverse=True)
        inverse = inverse.reshape(-1)
        found = [self._by_site.get((k >> _SITE_BITS, k & ((1 << _SITE_BITS) - 1))) for k in uniq.tolist()]
        ok = np.array([h is not None for h in found], dtype=bool)[inverse]
        hashes = np.array([0 if h is None else h for h in found], dtype=np.int64)[inverse]
        return hashes, ok

    def _resolve(self, raw: RawStack, new_stacks: list[StackRow]) -> int:
        if raw.pid not in self.resolver.files._maps:
            self.note_process(raw.pid)
        stack = self.resolver.resolve(raw)
        h = stack.hash
        if h not in self._stored:
            self._stored.add(h)
            new_stacks.append((h, stack.json, stack.call_site, stack.native_depth, stack.python_depth, stack.marker))
        return h
