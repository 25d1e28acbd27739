"""Live explain in a process of its own, so its CPU never takes the recorder's interpreter.

The rules over the last minute of a busy trace take seconds of CPU, most of
it in Python. On a thread of the agent they held the GIL the ring reader
and the writer need: at 300k calls/s under ``--record-all``, one evaluation
cost 1–9 % of the rows (counted as drops), none without it. Here a child
process runs ``ExplainFindings`` at the idle scheduling class (it gets a
CPU only when nothing else wants one), reads the rows from the recording
itself (a reader never writes, and the recorder hands nothing over), and
sends one JSON line per evaluation; ``LiveExplain`` is the ``FindingSource``
the live view and the metrics exporters read.

The child ends when its stdin closes: when the trace closes it, or when the
agent dies (the kernel closes the pipe).

At the idle class the child gets no CPU at all while every CPU is busy, the
case a contention tool exists for: beside two busy loops on 2 CPUs its first
evaluation never came. So a child that has said nothing for ``STARVED_S``
is moved to the normal class at nice ``STARVED_NICE`` (about a tenth of a
busy loop's share), and then paces its evaluations to ``STARVED_CPU_SHARE``
of one CPU: on a saturated machine the findings come, later and at a bounded
cost.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from gpuscope.tui.live_snapshot import LiveWindow

# What the child is given to end by itself once its stdin closes; then it is killed. It only reads the recording,
# so a kill loses nothing: the bound only spares an evaluation about to finish.
CLOSE_TIMEOUT_S = 2.0
STARVED_S = 15.0
STARVED_NICE = 10
STARVED_CPU_SHARE = 0.02
COMM = "gpuscope-rules"
NO_HANG = (
    "agent"  # the child's hang argument when the agent checks hangs itself  # 15 characters at most (TASK_COMM_LEN)
)


class LiveExplain:
    """The explain rules' live findings, evaluated by a child process (see the module's docstring).

    Args:
        db_path: the recording the trace writes.
        hang_threshold_ns: silence after which a rank behind its peers is a hang (None: the rule's default).
        hang_in_agent: the recording agent finds hangs itself (``NcclHangFindings``); the child leaves nccl-hang
            out. A hang must be seen while the job runs, and this child gets no CPU while every CPU is busy.
        every_s: at most one evaluation per this many seconds (the first comes this long after the start).
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        hang_threshold_ns: int | None = None,
        hang_in_agent: bool = False,
        every_s: float = 3.0,
    ) -> None:
        argv = [sys.executable, "-m", "gpuscope.tui.explain_process", str(db_path), str(os.getpid()), str(every_s)]
        if hang_in_agent:
            argv.append(NO_HANG)
        elif hang_threshold_ns is not None:
            argv.append(str(hang_threshold_ns))
        env = dict(os.environ)
        # The child imports this package from where this process did (a checkout or a wheel).
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self._lock = threading.Lock()
        self._lines: tuple[str, ...] = ()
        self._counts: dict[tuple[str, str], int] = {}
        self.evaluations = 0
        self.errors = 0
        self.last_error: str | None = None
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self._heard = time.monotonic()  # the child's start, then its last message
        self.raised = False  # moved out of the idle class after it starved
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read, name="gpuscope-explain", daemon=True)
        self._reader.start()
        self._watch = threading.Thread(target=self._watch_starvation, name="gpuscope-explain-watch", daemon=True)
        self._watch.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _read(self) -> None:
        out = self._proc.stdout
        assert out is not None
        for raw in out:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                self._heard = time.monotonic()
                if msg.get("error"):
                    self.errors += 1
                    self.last_error = str(msg["error"])
                    continue
                self.evaluations += 1
                self._lines = tuple(str(x) for x in msg.get("lines", ()))
                self._counts = {(str(k), str(s)): int(n) for k, s, n in msg.get("counts", ())}
        code = self._proc.wait()
        if code not in (0, None):
            with self._lock:
                self.errors += 1
                self.last_error = f"live explain ended with status {code}"

    def _watch_starvation(self) -> None:
        """Move the child out of the idle class once it has said nothing for ``STARVED_S`` (see the module)."""
        while not self._closed.wait(1.0):
            with self._lock:
                quiet = time.monotonic() - self._heard
            if quiet < STARVED_S or self._proc.poll() is not None:
                continue
            self._raise()
            return

    def _raise(self) -> None:
        """Move every thread of the child to the normal class at nice ``STARVED_NICE``."""
        try:
            # The policy and nice value are each thread's own: every thread of the child.
            for tid in os.listdir(f"/proc/{self._proc.pid}/task"):
                os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, int(tid), STARVED_NICE)
        except OSError:
            pass  # not ours to change (no CAP_SYS_NICE), or gone: it stays as it was
        else:
            self.raised = True

    def findings(self, window: LiveWindow) -> Sequence[str]:
        """The last evaluation's lines (never waits for one)."""
        with self._lock:
            return self._lines

    def finding_counts(self) -> dict[tuple[str, str], int]:
        """The latest evaluation's findings by (kind, severity): the metrics exporter's gauge."""
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        """Stop the child (an evaluation in progress finishes first, within a bound) and wait for it."""
        self._closed.set()
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self._proc.poll() is None and not self.raised:
            # At the idle class beside busy CPUs it would not run to see its stdin close: Ctrl-C on a trace
            # beside two busy loops waited the whole bound (10 s, then a kill) after everything else was done.
            self._raise()
        try:
            self._proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(CLOSE_TIMEOUT_S)
        self._watch.join(CLOSE_TIMEOUT_S)


# -- the child -------------------------------------------------------------------


def _idle_priority() -> None:
    """Run only when a CPU has nothing else to do: the traced program and the recorder come first."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        try:
            os.nice(19)
        except OSError:
            pass
    try:
        # Named in the kernel's events and in `ps`, not as one more python3.
        Path("/proc/self/comm").write_text(COMM)
    except OSError:
        pass


def _scheduled_normally() -> bool:
    try:
        return os.sched_getscheduler(0) != os.SCHED_IDLE
    except (OSError, AttributeError):
        return True


def _stop_requested(timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for stdin to close (the parent's signal to end, or its death)."""
    ready, _, _ = select.select([sys.stdin], [], [], max(0.0, timeout_s))
    return bool(ready) and not os.read(sys.stdin.fileno(), 4096)


def _child(argv: list[str]) -> int:
    db, agent_pid, every_s = Path(argv[0]), int(argv[1]), float(argv[2])
    in_agent = len(argv) > 3 and argv[3] == NO_HANG
    hang = int(argv[3]) if len(argv) > 3 and not in_agent else None
    _idle_priority()
    from gpuscope.tui.explain_source import MAX_LINES, ExplainFindings, finding_line

    ev = ExplainFindings(
        db, hang_threshold_ns=hang, hang=not in_agent, every_s=every_s, tracer_pids=frozenset({agent_pid, os.getpid()})
    )
    wait_s = every_s
    while not _stop_requested(wait_s):
        began, cpu0 = time.monotonic(), time.thread_time()
        try:
            found = ev.run_once()
            counts: dict[tuple[str, str], int] = {}
            for f in found:
                counts[f.kind, f.severity.name] = counts.get((f.kind, f.severity.name), 0) + 1
            msg: dict[str, object] = {
                "lines": [finding_line(f) for f in found[:MAX_LINES]],
                "counts": [[k, s, n] for (k, s), n in counts.items()],
            }
        except Exception as exc:  # a rule failing on partial data, the recording being created: next turn
            msg = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            sys.stdout.write(json.dumps(msg) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            return 0
        # Raised out of the idle class by the agent (it starved there): cheaper turns from now on.
        if _scheduled_normally():
            ev.cpu_share = min(ev.cpu_share, STARVED_CPU_SHARE)
        wait_s = ev.next_interval(time.thread_time() - cpu0) - (time.monotonic() - began)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
