"""Live demo runs: real processes on the bundled stand-in CUDA library, traced by the real tracer.

The workloads are C programs shipped inside the package (``workloads/*.c``),
compiled at run time against ``gpuscope/_standin/libcudart.so.12``. A
scenario's live part drives them through ``LiveRun``: start a traced
workload, start CPU hogs that are *not* traced (they appear only as the
preemptors in traced threads' scheduler events), wait. The ``TraceSession``
polls on a background thread while the scenario runs on the caller's
(``gpuscope.agent.traced_command.trace_beside``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path

from gpuscope.agent.options import TraceOptions
from gpuscope.agent.session import TraceSession
from gpuscope.agent.session_plan import SessionPlan
from gpuscope.agent.traced_command import Watch, launch_traced, trace_beside
from gpuscope.errors import EnvironmentUnsupported, GpuscopeError
from gpuscope.model.policy import DEFAULT_CPU_SAMPLE_HZ
from gpuscope.platform.standin import STANDIN_DIR
from gpuscope.store.processes_write import ProcessRow, insert_processes
from gpuscope.tui.live_findings import builtin_findings
from gpuscope.tui.live_snapshot import LiveSnapshot, SnapshotBuilder
from gpuscope.tui.source import SessionSource

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"

Progress = Callable[[float, str], None]


class NoCompilerError(EnvironmentUnsupported):
    remedy = "install a C compiler (apt-get install gcc), or run `gpuscope demo --synthetic` (no compiler, no root)"


class StandinMissingError(EnvironmentUnsupported):
    remedy = "build the stand-in CUDA libraries: python scripts/build_native.py (or reinstall gpuscope)"


@dataclass(frozen=True, slots=True)
class Workloads:
    """The compiled demo programs and the stand-in library directory they link against."""

    workload: Path
    hog: Path
    standin_dir: Path

    @property
    def cudart(self) -> Path:
        return self.standin_dir / "libcudart.so.12"


def compiler() -> str | None:
    return next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)


def build_workloads(out: Path, standin_dir: Path = STANDIN_DIR) -> Workloads:
    """Compile the shipped workload sources into ``out``.

    Raises NoCompilerError without a C compiler, StandinMissingError without the stand-in libraries.
    """
    cc = compiler()
    if cc is None:
        raise NoCompilerError("no C compiler (cc, gcc or clang) to build the demo workloads")
    if not (standin_dir / "libcudart.so.12").exists():
        raise StandinMissingError(f"no stand-in CUDA library in {standin_dir}")
    out.mkdir(parents=True, exist_ok=True)
    workload, hog = out / "demo_workload", out / "cpu_hog"
    link = [f"-L{standin_dir}", "-l:libcudart.so.12", f"-Wl,-rpath,{standin_dir}"]
    for cmd in (
        [cc, "-O1", "-fno-omit-frame-pointer", "-o", str(workload), str(WORKLOADS_DIR / "demo_workload.c"), *link],
        [cc, "-O1", "-o", str(hog), str(WORKLOADS_DIR / "cpu_hog.c")],
    ):
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise GpuscopeError(f"cannot build the demo workload: {p.stderr.strip()[:500]}")
    return Workloads(workload, hog, standin_dir)


class LiveRun:
    """What a scenario's live part may do: start traced workloads and untraced hogs, and wait.

    Every process started here is stopped by ``close`` (by its own pid).
    ``scale`` shortens (< 1) or lengthens a scenario; ``progress`` hears the
    fraction of the expected run time spent.
    """

    def __init__(
        self,
        session: TraceSession,
        programs: Workloads,
        workdir: Path,
        expected_s: float,
        progress: Progress | None = None,
    ) -> None:
        self.session = session
        self.programs = programs
        self.workdir = workdir
        self.expected_s = max(expected_s, 0.1)
        self.progress = progress
        self.started = time.monotonic()
        self.targets: list[subprocess.Popen[bytes]] = []
        self.others: list[subprocess.Popen[bytes]] = []
        self.can_rt = os.geteuid() == 0 and shutil.which("chrt") is not None
        self.can_pin = shutil.which("taskset") is not None and (os.cpu_count() or 1) > 1

    # -- processes -----------------------------------------------------------

    def _named(self, exe: Path, name: str) -> Path:
        """A copy of ``exe`` called ``name``, so the process's comm tells the story."""
        path = self.workdir / name
        if not path.exists():
            shutil.copy2(exe, path)
        return path

    def _wrap(self, argv: list[str], cpu: int | None, realtime: bool) -> list[str]:
        if cpu is not None and self.can_pin:
            argv = ["taskset", "-c", str(cpu), *argv]
        if realtime and self.can_rt:
            argv = ["chrt", "-f", "1", *argv]
        return argv

    def workload(
        self,
        mode: str,
        n: int,
        arg: str | None = None,
        *,
        name: str = "trainer",
        latency: dict[str, str] | None = None,
        cpu: int | None = None,
        realtime: bool = False,
    ) -> subprocess.Popen[bytes]:
        """Start a traced workload (see workloads/demo_workload.c for the modes).

        ``realtime`` runs it SCHED_FIFO where possible, so a busy machine's own
        tasks do not preempt it (scenarios whose cause is not the CPU).
        """
        exe = self._named(self.programs.workload, name)
        argv = self._wrap([str(exe), mode, str(n), *([arg] if arg else [])], cpu, realtime)
        env = dict(os.environ)
        env.pop("GPUSCOPE_STANDIN_RESULT", None)
        env["GPUSCOPE_STANDIN_LATENCY"] = ",".join(f"{k}={v}" for k, v in (latency or {}).items())
        proc = launch_traced(self.session, argv, env=env, stdout=subprocess.DEVNULL)
        self.targets.append(proc)
        return proc

    def python_workload(
        self, script: str, args: list[str], *, latency: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a traced Python workload shipped in ``gpuscope/demo/workloads`` (argv: the stand-in libcudart,
        then ``args``), under this interpreter."""
        path = Path(__file__).resolve().parent / "workloads" / script
        env = dict(os.environ)
        env.pop("GPUSCOPE_STANDIN_RESULT", None)
        env["GPUSCOPE_STANDIN_LATENCY"] = ",".join(f"{k}={v}" for k, v in (latency or {}).items())
        argv = [sys.executable, str(path), str(self.programs.cudart), *args]
        proc = launch_traced(self.session, argv, env=env, stdout=subprocess.DEVNULL)
        self.targets.append(proc)
        return proc

    @contextmanager
    def hogs(
        self, count: int, *, cpu: int | None = 0, busy_us: int = 0, idle_us: int = 0, name: str = "cpu_hog"
    ) -> Iterator[list[int]]:
        """Run ``count`` CPU hogs (untraced) for the body of the ``with``; yields their pids."""
        exe = self._named(self.programs.hog, name)
        extra = [str(busy_us), str(idle_us)] if busy_us and idle_us else []
        procs = [subprocess.Popen(self._wrap([str(exe), *extra], cpu, False)) for _ in range(count)]
        self.others.extend(procs)
        # A trace names untraced preemptors by pid only; the demo knows who it started, so it says.
        cmdline = " ".join([str(exe), *extra])
        seen_ns = time.time_ns()
        named = [ProcessRow(p.pid, seen_ns, comm=name, cmdline=cmdline, exe=str(exe)) for p in procs]
        self.session.writer.write(insert_processes, self.session.session_id, named)
        try:
            yield [p.pid for p in procs]
        finally:
            for p in procs:
                _kill(p)

    # -- time ------------------------------------------------------------------

    def _tick(self, what: str) -> None:
        if self.progress is not None:
            self.progress(min((time.monotonic() - self.started) / self.expected_s, 0.99), what)

    def wait(self, seconds: float, what: str = "running") -> None:
        """Let the scenario run for ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
            self._tick(what)

    def join(self, procs: list[subprocess.Popen[bytes]], what: str = "running", timeout_s: float = 60.0) -> None:
        """Wait for the workloads to exit (bounded: they are killed at the deadline)."""
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
            self._tick(what)
        for p in procs:
            if p.poll() is None:
                _kill(p)
            elif p.returncode != 0:
                raise GpuscopeError(f"demo workload exited with status {p.returncode}")

    def close(self) -> None:
        for p in (*self.others, *self.targets):
            _kill(p)


def _kill(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        with suppress(ProcessLookupError):
            p.send_signal(signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        p.wait(timeout=10)


def record_live(
    db: Path,
    programs: Workloads,
    workdir: Path,
    body: Callable[[LiveRun], None],
    *,
    expected_s: float,
    argv: list[str],
    progress: Progress | None = None,
    snapshots: Callable[[LiveSnapshot], None] | None = None,
) -> dict[str, int]:
    """Trace what ``body`` runs into ``db`` (every event stored); return the kernel counters.

    ``snapshots`` hears the live view's snapshot once a second (what `gpuscope trace` shows).
    Raises the tracer's own errors (permission, BTF, libbpf) when eBPF is unusable.
    """
    # No call stacks (an empty stack policy), but on-CPU samples with Python frames: they name the host's code.
    opts = TraceOptions(filter_targets=True, stacks=2, io=False, tcp=False, cpu_sample_hz=DEFAULT_CPU_SAMPLE_HZ)
    plan = SessionPlan.build(opts, db, argv=argv, libraries=[str(programs.cudart)], record_all=True)

    def scenario(session: TraceSession) -> None:
        run = LiveRun(session, programs, workdir, expected_s, progress)
        source = SessionSource(session, f"gpuscope demo ({programs.workload.name})")
        builder = SnapshotBuilder(source, snapshots, findings=builtin_findings()) if snapshots else None
        if builder is not None:
            builder.start()
        try:
            body(run)
        finally:
            if builder is not None:
                builder.stop()
            run.close()

    return trace_beside(plan, scenario, _OffCpu0()).counters


class _OffCpu0(Watch):
    """Keep gpuscope off CPU 0 while it records: the scenarios pin their workloads there (the tracer is not the story).

    Only this thread and the ones it starts from then on move (the recording
    loop's, the snapshot builder's); the session's own (the writer's) keep their CPUs.
    """

    def __init__(self) -> None:
        self.affinity: set[int] | None = None

    def begin(self, session: TraceSession) -> AbstractContextManager[object]:
        # Before the recording loop's thread starts: a thread takes the CPUs of the one that starts it.
        self.affinity = affinity = os.sched_getaffinity(0)
        if len(affinity) > 1 and 0 in affinity:
            os.sched_setaffinity(0, affinity - {0})
        return nullcontext()

    def closed(self) -> None:
        if self.affinity is not None:
            os.sched_setaffinity(0, self.affinity)
