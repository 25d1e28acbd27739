"""A real `gpuscope dashboard` process for the tests, a recording of a contention run, and certificates."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.client import HTTPResponse, HTTPSConnection
from pathlib import Path
from typing import Any

from gpuscope.model.ops import Op
from gpuscope.stacks.frames import Frame, Stack
from gpuscope.store.connect import connect_writer
from gpuscope.store.cpu_samples import insert_cpu_samples
from gpuscope.store.stacks_write import insert_stacks
from tests.unit.analysis.builder import MS, US, Events, steady_training

HOSTILE_COMM = "<svg onload=1>"
HOSTILE_FUNCTION = "<img src=x onerror=alert(1)>"
SAMPLE_HZ = 99


def contention_recording(path: Path, comm: str = HOSTILE_COMM, *, steps: int = 400, node: str | None = None) -> Path:
    """A training loop whose syncs are preempted one in four, by a CPU hog; the traced process named ``comm``."""
    ev = Events()
    ev.comms[100] = comm
    ev.comms[999] = "cpu_hog"
    for i, t in enumerate(steady_training(ev, steps)):
        if i % 4 == 0:
            ev.rows = [r for r in ev.rows if not (r[0] == t and r[4] == int(Op.cudaStreamSynchronize))]
            ev.add(Op.cudaStreamSynchronize, t, 50 * US + 5 * MS, 100)
            ev.sched(t + 20 * US, 5 * MS, preempted=True, by_pid=999)
    ev.to_db(path)
    if node is not None:
        conn = connect_writer(path)
        conn.execute("UPDATE sessions SET node = ?", (node,))
        conn.close()
    return path


# The on-CPU samples ``profile_recording`` adds: (stack, thread, how many, from when, 10 ms apart).
HOT_STACK = Stack(
    (
        Frame("python", HOSTILE_FUNCTION, file="/home/user/train.py", line=42),
        Frame("python", "train_step", file="/home/user/train.py", line=90),
        Frame("native", "_PyEval_EvalFrameDefault", module="/usr/lib/libpython3.12.so", offset=0x40),
    ),
    native_depth=1,
    python_depth=2,
    marker=None,
)
COLLATE_STACK = Stack(
    (
        Frame("python", "default_collate", file="/usr/lib/python3/dist-packages/torch/utils/data/collate.py", line=7),
        Frame("native", "memcpy", module="/usr/lib/libc.so.6", offset=0x10),
    ),
    native_depth=1,
    python_depth=1,
    marker=None,
)
PROFILE_SAMPLES = ((HOT_STACK, 100, 30, 100 * MS), (COLLATE_STACK, 101, 10, 3_800 * MS))


def profile_recording(path: Path) -> Path:
    """The contention run, with on-CPU samples of pid 100 at ``SAMPLE_HZ``: 30 of thread 100 in a function named
    like markup (in the first second), then 10 of thread 101 collating (in the last 200 ms of the recording)."""
    contention_recording(path)
    conn = connect_writer(path)
    insert_stacks(conn, [(s.hash, s.json, s.call_site, s.native_depth, s.python_depth, s.marker) for s in
                         (HOT_STACK, COLLATE_STACK)])  # fmt: skip
    insert_cpu_samples(
        conn,
        [(1, 100, tid, start + i * 10 * MS, stack.hash) for stack, tid, n, start in PROFILE_SAMPLES for i in range(n)],
    )
    conn.execute("UPDATE sessions SET flags = json_set(coalesce(flags, '{}'), '$.cpu_sample_hz', ?)", (SAMPLE_HZ,))
    conn.close()
    return path


@dataclass
class Server:
    proc: subprocess.Popen[str]
    info: dict[str, Any]
    home: Path

    @property
    def token(self) -> str:
        return str(self.info["url"]).split("token=", 1)[1]

    @property
    def port(self) -> int:
        return int(str(self.info["api"]).rsplit(":", 1)[1].split("/", 1)[0])

    def context(self, *, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        """A client context that trusts the server's certificate (pinned: the one file it uses)."""
        ctx = ssl.create_default_context(cafile=str(self.home / ".gpuscope" / "tls" / "dashboard-cert.pem"))
        if cert is not None:
            ctx.load_cert_chain(*cert)
        return ctx

    def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = "default",
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        ctx: ssl.SSLContext | None = None,
    ) -> tuple[HTTPResponse, bytes]:
        conn = HTTPSConnection("127.0.0.1", self.port, context=ctx or self.context(), timeout=30)
        all_headers = dict(headers or {})
        if token is not None:
            all_headers.setdefault("Authorization", f"Bearer {self.token if token == 'default' else token}")
        conn.request(method, path, body=body, headers=all_headers)
        res = conn.getresponse()
        data = res.read()
        conn.close()
        return res, data

    def get_json(self, path: str, **kw: Any) -> tuple[int, Any]:
        res, data = self.request("GET", path, **kw)
        return res.status, json.loads(data)


@contextmanager
def dashboard(db: Path, home: Path, *extra: str, env_extra: dict[str, str] | None = None) -> Iterator[Server]:
    """Start `gpuscope dashboard --addr 127.0.0.1:0 --json` on ``db`` with HOME ``home``; stop it afterwards."""
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home))
    env.pop("GPUSCOPE_TOKEN", None)  # a token of its own unless the test gives one
    env.update(env_extra or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "dashboard", "--db", str(db), "--addr", "127.0.0.1:0", "--json", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"dashboard did not start: {proc.stderr.read() if proc.stderr else ''}")
        # The socket listens before the line is printed: requests wait in its backlog until the app is up.
        yield Server(proc, json.loads(line), home)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
