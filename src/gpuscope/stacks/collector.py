"""The session's side of stacks: learn processes and files, resolve records, queue rows.

Runs on the collector thread. Rows go to the writer thread like everything
else, as named store writes: each distinct stack once (``insert_stacks``),
one link per call (``insert_event_stacks``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol

from gpuscope.stacks.python import LAYOUTS, find_interpreter, sanity_check
from gpuscope.stacks.records import RawStack, decode
from gpuscope.stacks.resolve import StackResolver
from gpuscope.store.stacks_write import EventStackRow, StackRow, insert_event_stacks, insert_stacks

P = ParamSpec("P")
# A process that looks like Python but has not mapped its runtime yet (just
# exec'd) is looked at again on every drain for this long.
PYTHON_LOOKUP_S = 3.0
_MAX_CACHED = 200_000


class Writer(Protocol):
    """Where rows go: ``gpuscope.store.writer.EventWriter`` runs each named write on its thread."""

    def write(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], object], /, *args: P.args, **kwargs: P.kwargs
    ) -> None: ...


class PythonTracer(Protocol):
    def set_python_offsets(self, version: int, packed: bytes) -> None: ...

    def set_python_process(self, pid: int, runtime: int, version: int) -> None: ...

    def clear_python_process(self, pid: int) -> None: ...


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
        self._by_key: dict[bytes, int] = {}
        self._stored: set[int] = set()
        self._python_pending: dict[int, float] = {}
        self._python_done: set[int] = set()
        self._loaded_layouts: set[int] = set()
        self._registered: dict[int, int] = {}
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
        self.note_process(pid, refresh=True)

    def note_process(self, pid: int, refresh: bool = False) -> None:
        """Index a live process's files; find its Python runtime for the in-kernel walk."""
        if refresh:
            self._python_done.discard(pid)
        maps = self.resolver.files.add_process(pid)
        if not self.python or pid in self._python_done or not maps:
            return
        interp = find_interpreter(pid, maps)
        if pid in self._registered and (interp is None or interp.runtime != self._registered[pid]):
            # exec'd another program: the old runtime address means nothing now
            self.tracer.clear_python_process(pid)
            self.resolver.interpreters.pop(pid, None)
            del self._registered[pid]
        if interp is None:
            exe = os.path.basename(maps[0].path) if maps else ""
            if "python" in exe:
                self._python_pending.setdefault(pid, time.monotonic() + PYTHON_LOOKUP_S)
            return
        self._python_pending.pop(pid, None)
        self._python_done.add(pid)
        lay = interp.layout
        if lay.minor < 0 or not sanity_check(interp):
            # Known interpreter, unknown layout: register it with an empty
            # slot so its events say why they have no Python frames.
            self.tracer.set_python_process(pid, interp.runtime, len(LAYOUTS) + 1)
            self._registered[pid] = interp.runtime
            return
        if lay.slot not in self._loaded_layouts:
            self.tracer.set_python_offsets(lay.slot, lay.pack())
            self._loaded_layouts.add(lay.slot)
        self.resolver.interpreters[pid] = interp
        self.tracer.set_python_process(pid, interp.runtime, lay.slot)
        self._registered[pid] = interp.runtime

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
        for body in bodies:
            raw = decode(body)
            if raw is None:
                continue
            if raw.window and not self.resolver.files.has_maps(raw.pid):
                self.note_process(raw.pid)
            key = raw.key + self.resolver.scan_key(raw)
            h = self._by_key.get(key)
            if h is None:
                h = self._resolve(raw, new_stacks)
                if len(self._by_key) > _MAX_CACHED:
                    self._by_key.clear()
                self._by_key[key] = h
            links.append((self.session_id, raw.pid, raw.tid, raw.ts_ns, h))
        if new_stacks:
            writer.write(insert_stacks, new_stacks)
        writer.write(insert_event_stacks, links)
        self.records += len(links)
        return len(links)

    def _resolve(self, raw: RawStack, new_stacks: list[StackRow]) -> int:
        if raw.pid not in self.resolver.files._maps:
            self.note_process(raw.pid)
        stack = self.resolver.resolve(raw)
        h = stack.hash
        if h not in self._stored:
            self._stored.add(h)
            new_stacks.append((h, stack.json, stack.call_site, stack.native_depth, stack.python_depth, stack.marker))
        return h
