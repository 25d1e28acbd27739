"""Two agents on one host know about each other: each running trace is registered while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuscope.agent.peers import Registration, running_peers


def test_a_registered_agent_is_seen_by_another_until_it_ends(tmp_path: Path) -> None:
    # given a trace registered by a process that looks like an agent (its command line names gpuscope)
    agent = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "gpuscope"], stdin=subprocess.PIPE)
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
