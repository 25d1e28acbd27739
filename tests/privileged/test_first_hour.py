"""The ordinary workflow of a new user: sudo to trace, oneself to read; stdout left to the traced program.

Each test runs the real tracer on the stand-in CUDA runtime. The sudo test
creates a real user with a private home and lets it run sudo without a
password for the test's length only.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import StandinLibs, TraceRun

# Bytes a person would notice mangled: no final newline, a NUL, invalid UTF-8, a JSON-looking line.
PROGRAM_OUTPUT = b'line one\n{"type": "not gpuscope"}\n\x00\xff raw bytes\nno newline at the end'


def _workload(tmp_path: Path, standin: StandinLibs, *, calls: int, seconds: float = 0.0) -> list[str]:
    """A Python program that calls cudaMalloc ``calls`` times over ``seconds``, then writes PROGRAM_OUTPUT."""
    script = tmp_path / "workload.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import ctypes, sys, time
            lib = ctypes.CDLL({str(standin.cudart)!r})
            ptr = ctypes.c_void_p()
            for _ in range({calls}):
                lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(256))
                time.sleep({seconds / max(calls, 1)!r})
            sys.stdout.buffer.write({PROGRAM_OUTPUT!r})
            """
        )
    )
    return [sys.executable, str(script)]


def _trace(db: Path, standin: StandinLibs, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", "trace", "--db", str(db), "--lib", str(standin.cudart), *args],
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def _mallocs(db: Path) -> int:
    n = TraceRun(db, 0, "", "").query("SELECT count(*) FROM events WHERE op = 'cudaMalloc'")[0][0]
    assert isinstance(n, int), n
    return n


def test_stdout_of_trace_is_the_commands_stdout_byte_for_byte(tmp_path: Path, standin: StandinLibs) -> None:
    db = tmp_path / "t.db"
    p = _trace(db, standin, "--", *_workload(tmp_path, standin, calls=200))
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout == PROGRAM_OUTPUT
    # gpuscope's own words went to stderr, and the calls were recorded
    assert b"recorded to" in p.stderr and b"cudaMalloc" in p.stderr
    assert _mallocs(db) == 200


def test_the_json_stream_goes_to_its_own_file(tmp_path: Path, standin: StandinLibs) -> None:
    db, stream = tmp_path / "t.db", tmp_path / "t.jsonl"
    p = _trace(db, standin, "-o", str(stream), "--", *_workload(tmp_path, standin, calls=300, seconds=1.5))
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout == PROGRAM_OUTPUT
    records = [json.loads(line) for line in stream.read_text().splitlines()]
    assert len(records) >= 2  # at least one interval and the end record
    end = records[-1]
    assert (end["type"], end["db"]) == ("end", str(db))
    assert all(r.get("type") != "end" for r in records[:-1])
    assert _mallocs(db) == 300


def test_json_with_a_command_and_no_file_is_refused_before_anything_runs(tmp_path: Path, standin: StandinLibs) -> None:
    db, marker = tmp_path / "t.db", tmp_path / "ran"
    p = _trace(db, standin, "--json", "--", "touch", str(marker))
    assert p.returncode == 2
    assert b"-o FILE" in p.stderr
    assert not marker.exists() and not db.exists()


def test_a_closed_reader_of_gpuscope_leaves_the_command_running_untouched(tmp_path: Path, standin: StandinLibs) -> None:
    # given a JSON stream into a pipe whose reader takes one line and goes away (`| head -1`)
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)
    first: list[str] = []

    def head_1() -> None:
        with open(fifo) as reader:
            first.append(reader.readline())

    reader = threading.Thread(target=head_1, daemon=True)
    reader.start()
    db = tmp_path / "t.db"
    # when the command runs on for seconds after that
    p = _trace(db, standin, "-o", str(fifo), "--", *_workload(tmp_path, standin, calls=400, seconds=3.5))
    reader.join(timeout=30)
    # then the command ran to its end with its output whole, and every call is recorded
    assert json.loads(first[0])["type"] != "end"
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout == PROGRAM_OUTPUT
    assert _mallocs(db) == 400
    assert b"Traceback" not in p.stderr


@pytest.fixture
def sudo_user(tmp_path: Path) -> Iterator[pwd.struct_passwd]:
    """A real user with a private home, allowed passwordless sudo until the test ends."""
    if shutil.which("sudo") is None or shutil.which("useradd") is None:
        pytest.fail("sudo and useradd are installed by `make setup`")
    name = f"gpuscope-t{os.getpid() % 100000}"
    subprocess.run(["userdel", "-r", name], capture_output=True, check=False)  # left by a killed run
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
    rule = Path(f"/etc/sudoers.d/{name}")
    try:
        entry = pwd.getpwnam(name)
        os.chmod(entry.pw_dir, 0o700)  # a home only its owner reads, as on Debian
        rule.write_text(f"{name} ALL=(root) NOPASSWD: ALL\n")
        rule.chmod(0o440)
        yield entry
    finally:
        rule.unlink(missing_ok=True)
        subprocess.run(["userdel", "-r", name], capture_output=True, check=False)


def test_sudo_trace_then_explain_as_oneself(tmp_path: Path, standin: StandinLibs, sudo_user: pwd.struct_passwd) -> None:
    home = Path(sudo_user.pw_dir)
    # the workload and its libraries are readable by anyone, as a user's project would be for root
    work = tmp_path / "work"
    work.mkdir()
    command = _workload(work, standin, calls=150)
    # setpriv, not runuser: it runs this interpreter wherever it lives (runuser's login checks refuse some)
    setpriv = shutil.which("setpriv") or "setpriv"
    as_user = [setpriv, f"--reuid={sudo_user.pw_uid}", f"--regid={sudo_user.pw_gid}", "--init-groups"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    # when the user records with sudo, naming no recording
    traced = subprocess.run(
        [
            *as_user,
            "sudo",
            "-n",
            sys.executable,
            "-m",
            "gpuscope",
            "trace",
            "--lib",
            str(standin.cudart),
            "--",
            *command,
        ],
        capture_output=True,
        env=env,
        cwd="/",
        timeout=120,
        check=False,
    )
    assert traced.returncode == 0, traced.stderr.decode()
    # then the recording is in the user's home, owned by the user, not in root's
    db = home / ".gpuscope" / "gpuscope.db"
    assert db.is_file(), traced.stderr.decode()
    for path in (db, db.parent):
        assert (path.stat().st_uid, path.stat().st_gid) == (sudo_user.pw_uid, sudo_user.pw_gid), path
    assert f"recorded to {db} ".encode() in traced.stderr
    # and the same user, without sudo, explains and queries it with the defaults
    explained = subprocess.run(
        [*as_user, sys.executable, "-m", "gpuscope", "explain", "--json"],
        capture_output=True,
        env=env,
        cwd="/",
        timeout=120,
        check=False,
    )
    assert explained.returncode == 0, explained.stderr.decode()
    assert json.loads(explained.stdout)["window"]["events"] >= 150
    counted = subprocess.run(
        [*as_user, sys.executable, "-m", "gpuscope", "query", "--csv", "SELECT count(*) AS n FROM cuda_calls"],
        capture_output=True,
        env=env,
        cwd="/",
        timeout=120,
        check=False,
    )
    assert counted.returncode == 0, counted.stderr.decode()
    assert counted.stdout.decode().splitlines()[1] == "150"
