"""Two agents on one host know about each other: each running trace is registered while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuscope.agent.peers import Registration, running_peers


def _wait_for_its_command_line(pid: int) -> None:
    """A spawned child's command line is empty until its exec has set it up (after the spawn has returned)."""
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_registered_agent_is_seen_by_another_until_it_ends(tmp_path: Path) -> None:
    # given a trace registered by a process that looks like an agent (its command line names gpuscope)
    agent = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "gpuscope"], stdin=subprocess.PIPE)
    _wait_for_its_command_line(agent.pid)
    try:
        doc = {"pid": agent.pid, "db": "/var/lib/gpuscope/node.db", "every_process": True, "started_wall_ns": 1}
        (tmp_path / f"{agent.pid}.json").write_text(json.dumps(doc))
        # when another looks, then it is named with its recording and mode
        (peer,) = running_peers(tmp_path)
        assert (peer.pid, peer.db, peer.every_process) == (agent.pid, "/var/lib/gpuscope/node.db", True)
    finally:
        agent.communicate(b"")
    # and once it is gone (killed: its file stays), it is no one, and its file is removed
    assert running_peers(tmp_path) == []
    assert not (tmp_path / f"{agent.pid}.json").exists()


def test_a_pid_reused_by_another_program_is_not_an_agent(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "30"])
    _wait_for_its_command_line(other.pid)
    try:
        doc = {"pid": other.pid, "db": "x.db", "every_process": False, "started_wall_ns": 1}
        (tmp_path / f"{other.pid}.json").write_text(json.dumps(doc))
        assert running_peers(tmp_path) == []
    finally:
        other.kill()
        other.wait()


def test_this_agents_registration_is_its_own_while_it_runs_and_gone_after(tmp_path: Path) -> None:
    with Registration("rec.db", every_process=False, run_dir=tmp_path) as reg:
        assert reg.path is not None and json.loads(reg.path.read_text())["pid"] == os.getpid()
        assert running_peers(tmp_path) == []  # never its own peer
    assert list(tmp_path.iterdir()) == []


def test_a_garbled_entry_or_an_unwritable_folder_never_fails_a_trace(tmp_path: Path) -> None:
    (tmp_path / "123.json").write_text("{not json")
    assert running_peers(tmp_path) == []
    blocked = tmp_path / "file"
    blocked.write_text("")
    with Registration("rec.db", every_process=True, run_dir=blocked / "sub") as reg:
        assert reg.path is None


def test_an_agent_caught_in_the_middle_of_an_exec_is_neither_named_nor_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuscope.agent.peers as peers

    doc = {"pid": os.getpid(), "db": "x.db", "every_process": True, "started_wall_ns": 1}
    (tmp_path / "entry.json").write_text(json.dumps(doc))
    monkeypatch.setattr(peers, "_is_gpuscope", lambda pid: None)  # its command line not set up yet
    assert running_peers(tmp_path, me=-1) == []
    assert (tmp_path / "entry.json").exists()
