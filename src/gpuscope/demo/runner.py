"""Run one scenario in one mode into a database, then explain it. Never prints."""

from __future__ import annotations

import enum
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gpuscope.agent.options import TraceOptions
from gpuscope.agent.session_plan import SessionPlan
from gpuscope.agent.traced_command import Ending, Watch, trace_command
from gpuscope.analysis.engine import ExplainOptions, Report, explain_db
from gpuscope.demo.gpu import NoGpuError, detect_gpu, script_path, torch_cuda
from gpuscope.demo.live import LiveRun, Progress, Workloads, build_workloads, record_live
from gpuscope.demo.scenario import Scenario
from gpuscope.demo.synthetic import SyntheticRecording
from gpuscope.errors import EnvironmentUnsupported, GpuscopeError
from gpuscope.model.policy import DEFAULT_CPU_SAMPLE_HZ
from gpuscope.model.session_choice import SessionChoice, SessionScope
from gpuscope.recording import open_recording
from gpuscope.store.findings_history import save_findings
from gpuscope.store.private_snapshot import user_cache_dir
from gpuscope.store.sessions_read import last_session
from gpuscope.tui.live_snapshot import LiveSnapshot

if TYPE_CHECKING:
    from gpuscope.agent.session import TraceSession


class DemoMode(enum.Enum):
    LIVE = "live"  # real processes on the stand-in CUDA library, real eBPF
    SYNTHETIC = "synthetic"  # generated events, no root
    GPU = "gpu"  # PyTorch on a real GPU, real eBPF


@dataclass(frozen=True, slots=True)
class DemoResult:
    scenario: Scenario
    mode: DemoMode
    db: Path
    session_id: int
    events: int
    elapsed_s: float
    report: Report

    @property
    def top_kind(self) -> str | None:
        return self.report.findings[0].kind if self.report.findings else None

    @property
    def as_expected(self) -> bool:
        return self.top_kind == self.scenario.expected_kind


def ebpf_usable() -> tuple[bool, str]:
    """Whether live tracing can work here: root and a BPF program the kernel accepts (tried, not assumed)."""
    if os.geteuid() != 0:
        return False, "not root"
    try:
        from gpuscope.bpf.features import probe_bpf_load

        feat = probe_bpf_load()
    except GpuscopeError as exc:
        return False, str(exc)
    return feat.available, feat.detail


# The files SQLite and the tracer keep beside a recording.
_COMPANIONS = ("", "-wal", "-shm", "-journal", "-reserve")


def default_db() -> Path:
    """The demo's own recording, ``$XDG_CACHE_HOME/gpuscope/demo/demo.db``, emptied for this run.

    One fixed place instead of a new temporary folder per run: the path the
    demo prints still works for `explain` and `query` afterwards, and runs do
    not pile up. The previous run's recording is removed here.
    Raises DatabaseError when the cache folder cannot be made.
    """
    folder = user_cache_dir("demo", remedy="pass `--db PATH` to keep the demo's recording elsewhere")
    db = folder / "demo.db"
    for suffix in _COMPANIONS:
        with suppress(FileNotFoundError):
            os.unlink(f"{db}{suffix}")
    return db


@contextmanager
def termination_interrupts() -> Iterator[None]:
    """Inside: SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does.

    A demo stopped by ``kill`` or a closed terminal then still kills its CPU
    hogs and workloads and removes its work folder (the default action would
    end the process with none of that done). Only the main thread can take
    signals; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def _last_session(db: Path) -> tuple[int, int]:
    conn = open_recording(db)
    try:
        return last_session(conn) or (0, 0)
    finally:
        conn.close()


class DemoRunner:
    """Run scenarios into one database; each scenario is its own session, explained on its own.

    Args:
        db: the database (sessions are appended).
        scale: multiplies each scenario's length (< 1 for a quick run).
        workdir: where live workloads are compiled (default: a temporary folder,
            made on the first live run and removed by ``close`` or with the runner).

    Usable as a context manager, which closes it; inside it SIGTERM and SIGHUP
    interrupt like Ctrl-C (``termination_interrupts``), so the folder goes and
    no workload outlives a killed demo.
    """

    def __init__(self, db: Path, *, scale: float = 1.0, workdir: Path | None = None) -> None:
        if scale <= 0:
            raise GpuscopeError("scale must be positive")
        self.db = db
        self.scale = scale
        self._workdir = workdir
        self._own_workdir: tempfile.TemporaryDirectory[str] | None = None
        self._programs: Workloads | None = None
        self._signals: ExitStack | None = None

    @property
    def workdir(self) -> Path:
        """Where live workloads are compiled and run; a temporary folder of the runner's own unless one was given."""
        if self._workdir is None:
            self._own_workdir = tempfile.TemporaryDirectory(prefix="gpuscope-demo-work-")
            self._workdir = Path(self._own_workdir.name)
        return self._workdir

    def close(self) -> None:
        """Remove the runner's own work folder (a folder passed as ``workdir`` is left alone)."""
        if self._own_workdir is not None:
            self._own_workdir.cleanup()
            self._own_workdir = None
            self._workdir = None
            self._programs = None  # they were compiled into the folder just removed

    def __enter__(self) -> DemoRunner:
        self._signals = ExitStack()
        self._signals.enter_context(termination_interrupts())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            if self._signals is not None:
                self._signals.close()
                self._signals = None

    def run(
        self,
        scenario: Scenario,
        mode: DemoMode,
        progress: Progress | None = None,
        snapshots: Callable[[LiveSnapshot], None] | None = None,
    ) -> DemoResult:
        """Record the scenario, then explain exactly that session's window.

        ``snapshots`` (live mode) hears the live view's snapshot once a second.
        """
        t0 = time.monotonic()
        argv = ["gpuscope", "demo", scenario.name, f"--{mode.value}"]
        if mode is DemoMode.SYNTHETIC:
            rec = SyntheticRecording(self.db, argv, scenario.name)
            scenario.synthetic(rec, self.scale)
            if progress:
                progress(0.5, "writing events")
            rec.finish()
        elif mode is DemoMode.LIVE:
            if self._programs is None:
                self._programs = build_workloads(self.workdir)
            programs = self._programs

            def body(run: LiveRun) -> None:
                scenario.live(run, self.scale)

            expected_s = scenario.live_seconds * self.scale + 0.5
            record_live(
                self.db,
                programs,
                self.workdir,
                body,
                expected_s=expected_s,
                argv=argv,
                progress=progress,
                snapshots=snapshots,
            )
        else:
            self._run_gpu(scenario, argv, progress)
        if progress:
            progress(1.0, "explaining")
        session_id, events = _last_session(self.db)
        report = explain_db(self.db, _session_window(session_id))
        if report.findings:
            # The demo's own recording: keep its findings, as `explain --save-findings` would.
            w = report.window
            save_findings(
                self.db, report.findings, session_id=session_id, window_start_ns=w.start_ns, window_end_ns=w.end_ns
            )
            report = replace(report, stored=True)
        return DemoResult(scenario, mode, self.db, session_id, events, time.monotonic() - t0, report)

    def _run_gpu(self, scenario: Scenario, argv: list[str], progress: Progress | None) -> None:
        if detect_gpu() is None:
            raise NoGpuError("no NVIDIA GPU found (nvidia-smi and /proc/driver/nvidia/version are missing)")
        why = torch_cuda()
        if why is not None:
            raise NoGpuError(f"--gpu needs PyTorch with CUDA: {why}")
        if scenario.gpu_script is None:
            raise EnvironmentUnsupported(f"scenario {scenario.name} has no GPU version")
        command = [sys.executable, str(script_path(scenario.gpu_script)), str(self.scale)]
        # No call stacks (an empty stack policy), but on-CPU samples with Python frames: they name the host's code.
        opts = TraceOptions(filter_targets=True, stacks=2, io=False, tcp=False, cpu_sample_hz=DEFAULT_CPU_SAMPLE_HZ)
        plan = SessionPlan.build(opts, self.db, argv=argv, command=command, record_all=True)
        watch = _GpuWatch(progress, expected_s=scenario.live_seconds * self.scale + 5)
        # The workload is the demo's own: killed if it is still running when the trace ends, however it ends.
        trace_command(plan, command, watch, ending=Ending.KILL, duration_s=_GPU_RUN_MAX_S)


# A PyTorch scenario that runs longer than this is stopped.
_GPU_RUN_MAX_S = 600.0


class _GpuWatch(Watch):
    """The GPU demo's part of its trace: refuse without a CUDA library to probe, and report progress."""

    def __init__(self, progress: Progress | None, *, expected_s: float) -> None:
        self.progress = progress
        self.expected_s = expected_s

    def opened(self, session: TraceSession) -> None:
        if not session.attached:
            raise EnvironmentUnsupported("no CUDA library found for the PyTorch workload")

    def should_stop(self, elapsed_s: float) -> bool:
        if self.progress:
            self.progress(min(elapsed_s / self.expected_s, 0.99), "PyTorch workload")
        return False


def _session_window(session_id: int) -> ExplainOptions:
    """Options that analyse one session: the scenario the runner just recorded."""
    return ExplainOptions(sessions=SessionChoice(SessionScope.ONE, session_id, True))
