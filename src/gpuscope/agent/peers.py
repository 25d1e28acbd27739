"""The other gpuscope agents tracing this host, so that two agents know about each other.

Each agent's uprobes trap on every call of the library they are attached to,
whichever process makes it: a second agent doubles the cost of every call
both can see, and two agents that each trace every process record the same
calls twice at twice the cost. Each running trace leaves a small file in
``RUN_DIR`` (its pid, its recording, whether it traces every process),
removed when it ends; a file whose agent is gone (killed) is ignored and
removed by the next look.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

# On tmpfs (gone at a reboot, as the agents are); only root writes it, as only root traces.
RUN_DIR = Path("/run/gpuscope/agents")


@dataclass(frozen=True, slots=True)
class PeerAgent:
    """Another running trace: its pid, its recording, whether it traces every process, when it started."""

    pid: int
    db: str
    every_process: bool
    started_wall_ns: int


def _is_gpuscope(pid: int) -> bool | None:
    """Whether ``pid`` is alive and a gpuscope agent (a reused pid is another program); None: cannot tell now."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if not cmdline:
        return None  # in the middle of an exec, or exited and not yet reaped
    return any(b"gpuscope" in part for part in cmdline.split(b"\0")[:4])


def running_peers(run_dir: Path = RUN_DIR, me: int | None = None) -> list[PeerAgent]:
    """The agents registered in ``run_dir`` that still run, oldest first (stale files are removed)."""
    me = os.getpid() if me is None else me
    found = []
    try:
        entries = sorted(run_dir.glob("*.json"))
    except OSError:
        return []
    for path in entries:
        try:
            doc = json.loads(path.read_text())
            peer = PeerAgent(int(doc["pid"]), str(doc["db"]), bool(doc["every_process"]), int(doc["started_wall_ns"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours: never a reason to fail a trace
        if peer.pid == me:
            continue
        agent = _is_gpuscope(peer.pid)
        if not agent:
            if agent is False:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        found.append(peer)
    return sorted(found, key=lambda p: p.started_wall_ns)


class Registration:
    """This agent's entry in ``run_dir`` while it traces (``close`` removes it); nothing when it cannot write."""

    def __init__(self, db: str | os.PathLike[str], every_process: bool, run_dir: Path = RUN_DIR) -> None:
        self.path: Path | None = run_dir / f"{os.getpid()}.json"
        doc = {
            "pid": os.getpid(),
            "db": os.fspath(db),
            "every_process": every_process,
            "started_wall_ns": time.time_ns(),
        }
        try:
            run_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
            tmp = run_dir / f".{os.getpid()}.tmp"
            tmp.write_text(json.dumps(doc))
            tmp.replace(self.path)
        except OSError:
            self.path = None  # a read-only /run: the trace runs, unseen by later ones

    def close(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.path = None

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["RUN_DIR", "PeerAgent", "Registration", "running_peers"]
