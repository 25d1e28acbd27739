"""What one recording records and where: a plan, built and checked before a probe is loaded or a file opened.

``gpuscope trace`` builds its plan from its arguments before the probes start
loading (and loads them with ``plan.opts``); the demo builds its own. The
``TraceSession`` then only carries the plan out. Light to import: the trace
command builds it before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuscope.config import expand_home

if TYPE_CHECKING:
    from gpuscope.agent.options import TraceOptions


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """What a session records, as the caller asked for it; build with ``SessionPlan.build``.

    opts: the options the tracer is loaded with (late loads off when ``libraries`` names the libraries).
    db_path: the recording; one that exists gets a new session.
    node: the node name stored with every event.
    argv: the command line stored with the session.
    libraries: trace these library copies and only these (empty: found by discovery, and those loaded later).
    command: the command about to be launched; its environment and rpath name its libraries
        (None: pids or every process, whose libraries are looked for on the system).
    discovery_env: the environment libraries are looked for with (None: ours).
    scan_system: without ``libraries`` or a ``command``, look for libraries on the whole system.
    record_all: store a row for every event (otherwise the storage policy keeps a selection).
    max_db_bytes: keep the recording under this size, 0 for no cap (None: the store's default cap).
    keep_first_s: the first seconds of the trace, and of each new process, are probed whole and kept.
    budget: the overhead budget as a share of CPU time (None: every call probed, when the probes allow).
    """

    opts: TraceOptions
    db_path: Path
    node: str
    argv: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    discovery_env: Mapping[str, str] | None = None
    scan_system: bool = True
    record_all: bool = False
    max_db_bytes: int | None = None
    keep_first_s: float = 10.0
    budget: float | None = None

    def __post_init__(self) -> None:
        # Programming errors, not user input: commands report bad values as UsageError before building a plan.
        if self.libraries and self.opts.late_loads:
            raise ValueError("a plan over named libraries attaches no library loaded later (build it with build())")
        if self.max_db_bytes is not None and self.max_db_bytes < 0:
            raise ValueError(f"max_db_bytes must be 0 (no cap) or more, not {self.max_db_bytes}")
        if self.keep_first_s < 0:
            raise ValueError(f"keep_first_s must not be negative, not {self.keep_first_s}")
        if self.budget is not None and not 0 < self.budget < 1:
            raise ValueError(f"budget must be a share of CPU time between 0 and 1, not {self.budget}")

    @classmethod
    def build(
        cls,
        opts: TraceOptions,
        db_path: str | os.PathLike[str],
        *,
        node: str | None = None,
        argv: Sequence[str] = (),
        libraries: Sequence[str] = (),
        command: Sequence[str] | None = None,
        discovery_env: Mapping[str, str] | None = None,
        scan_system: bool = True,
        record_all: bool = False,
        max_db_bytes: int | None = None,
        keep_first_s: float = 10.0,
        budget: float | None = None,
    ) -> SessionPlan:
        """The plan for these settings: ``node`` defaults to the host's name, ``~`` in ``db_path`` is expanded.

        An empty ``command`` is no command. Raises ValueError on a value no session can record with.
        """
        return cls(
            # The user named the libraries: trace those, and only those.
            opts=dataclasses.replace(opts, late_loads=False) if libraries else opts,
            db_path=expand_home(db_path),
            node=node or socket.gethostname(),
            argv=tuple(argv),
            libraries=tuple(libraries),
            command=tuple(command) if command else None,
            discovery_env=discovery_env,
            scan_system=scan_system,
            record_all=record_all,
            max_db_bytes=max_db_bytes,
            keep_first_s=keep_first_s,
            budget=budget,
        )

    @property
    def defers_attach(self) -> bool:
        """Whether libraries found at start wait for a launched command's first load of them (when the kernel
        can hold processes there): probes on every copy on the machine would make other jobs pay for them."""
        return self.command is not None and not self.libraries
