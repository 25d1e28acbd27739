"""What `gpuscope trace` does while it records: targets, the header, the live output, explain and exporters.

The composition that runs the trace is ``gpuscope.agent.traced_command``;
this is the command's part of it (``TraceWatch``), and everything it tells
the person, on stderr. Imported by the trace command while the probes load.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, TextIO

from gpuscope.agent.traced_command import Watch
from gpuscope.commands._exporters import ExporterPlan, RunningExporters, start_exporters
from gpuscope.errors import NoCudaLibraryError
from gpuscope.tui.command_stderr import CommandStderr
from gpuscope.tui.explain_process import LiveExplain
from gpuscope.tui.live_findings import NcclHangFindings, builtin_findings
from gpuscope.tui.output import LiveOutput, OutputMode, choose_mode, same_terminal

if TYPE_CHECKING:
    from gpuscope.agent.live_stats import Tick
    from gpuscope.agent.peers import PeerAgent
    from gpuscope.agent.session import TraceSession
    from gpuscope.agent.traced_command import Process


class TraceWatch(Watch):
    """The trace command's part of a trace: what it adds, shows and starts, and what it says.

    Args:
        args: the command's arguments (``--pid``, ``--no-tui``).
        command: the command launched (empty: none).
        json_out: where the JSON stream goes (None: no JSON).
        status_every: without the full screen, a status line every this many seconds (0: none).
        exporters: the metrics exporters asked for.
        hang_threshold_ns: the live nccl-hang finding's silence.
        peers: the other gpuscope agents tracing this host (named in the header).

    After the trace, ``live`` (the output, to finish) and ``metrics`` (the
    running exporters, to close) are the caller's.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        command: list[str],
        json_out: TextIO | None,
        *,
        status_every: int,
        exporters: ExporterPlan,
        hang_threshold_ns: int,
        peers: Sequence[PeerAgent] = (),
    ) -> None:
        self.pids: list[int] = args.pid
        self.no_tui: bool = args.no_tui
        self.command = command
        self.json_out = json_out
        self.status_every = status_every
        self.exporters = exporters
        self.hang_threshold_ns = hang_threshold_ns
        self.peers = tuple(peers)
        self.explain: LiveExplain | None = None
        self.metrics: RunningExporters | None = None
        self.live: LiveOutput | None = None
        # The command's stderr while the full screen holds the terminal (None: it writes to ours).
        self.stderr: CommandStderr | None = None

    def opened(self, session: TraceSession) -> None:
        for pid in self.pids:
            session.add_target(pid)
        if not session.attached and session.flags["late_loads"] not in ("hold", "attach"):
            # Without the kernel reporting library loads, nothing could ever be traced. With it, a job (or, in a
            # DaemonSet, the first job on the node) that loads CUDA later is attached at its first load.
            raise NoCudaLibraryError("no CUDA library (libcudart / libcuda) found to attach to")

    def begin(self, session: TraceSession) -> AbstractContextManager[object]:
        print_header(session, self.command, self.pids)
        for peer in self.peers:
            what = "every process" if peer.every_process else "its own processes"
            print(
                f"  also tracing this host: gpuscope pid {peer.pid} ({what}, into {peer.db}): a call both trace "
                "is probed twice",
                file=sys.stderr,
            )
        # The command's output comes first: the full screen only when it writes elsewhere (`> train.log`).
        shared = bool(self.command) and same_terminal(sys.stdout, sys.stderr)
        mode = choose_mode(
            no_tui=self.no_tui, json=self.json_out is not None, terminal=sys.stderr.isatty(), shared=shared
        )
        if shared and not self.no_tui and self.json_out is None:
            print(
                "live view: a status line a second, between the command's own output (send its output "
                "elsewhere, `> train.log`, for the full-screen view)",
                file=sys.stderr,
            )
        # Explain rules over the recent recording, beside the built-in live findings: in a process of their
        # own, at idle priority, so that they never take the interpreter from the recorder. A hung NCCL rank
        # is found by the agent itself: the child gets no CPU while every CPU is busy (a spinning rank's too).
        hangs = NcclHangFindings(session.nccl, self.hang_threshold_ns)
        self.explain = LiveExplain(session.db_path, hang_in_agent=True)
        self.metrics = _start_exporters(session, self.explain, hangs, self.exporters)
        if mode is OutputMode.TUI and self.command:
            # The full screen would draw over what the command writes to stderr, and take it away at the end.
            self.stderr = CommandStderr(sys.stderr.fileno())
        self.live = LiveOutput(
            session,
            mode,
            target_text(self.command, self.pids),
            findings=[hangs, *builtin_findings(session.flags), self.explain],
            stdout=self.json_out,
            status_every=self.status_every,
            command_tail=self.stderr.tail if self.stderr is not None else None,
        )
        return self.live

    def command_stderr(self) -> int | None:
        return self.stderr.fd if self.stderr is not None else None

    def launched(self) -> None:
        if self.stderr is not None:
            self.stderr.launched()

    def on_tick(self, tick: Tick) -> None:
        if self.live is not None:
            self.live.on_tick(tick)

    def closed(self) -> None:
        # The live explain process ends with the session (it ran on while the session detached and drained).
        if self.explain is not None:
            self.explain.close()
        if self.stderr is not None:
            # The screen has closed: everything the command wrote to stderr, in order, before the summary.
            sys.stderr.flush()
            self.stderr.replay(sys.stderr.fileno())
            self.stderr = None

    def recording_stopped(self, session: TraceSession, proc: Process | None) -> None:
        reason = session.failure or "error"
        what = f"the file system of {session.db_path} is full" if reason == "disk full" else reason
        print(f"\ngpuscope: recording stopped at {stopped_at(session)}: {what}", file=sys.stderr)
        if proc is not None and proc.poll() is None:
            print(
                f"gpuscope: `{' '.join(self.command)}` (pid {proc.pid}) runs on untraced; waiting for it to end "
                "(Ctrl-C stops it)",
                file=sys.stderr,
            )

    def left_running(self, proc: Process) -> None:
        print(f"gpuscope: `{' '.join(self.command)}` (pid {proc.pid}) runs on untraced", file=sys.stderr)


def stopped_at(session: TraceSession) -> str:
    """The time the recording is complete up to: the same explain and query show for the session."""
    # Only after a failure: its module costs ~50 ms of imports.
    from gpuscope.analysis.recording_state import iso_wall

    return iso_wall(session.committed_wall_ns) or "its start"


def _start_exporters(
    session: TraceSession, explain: LiveExplain, hangs: NcclHangFindings, plan: ExporterPlan
) -> RunningExporters | None:
    """Start the metrics exporters asked for (closed after the session: the last scrape or push sees it all)."""
    if plan.prometheus is None and plan.otlp is None:
        return None  # before the import: prometheus_client costs ~50 ms of every trace's start-up
    from gpuscope.exporters.metrics import SamplingInputs, TraceMetrics
    from gpuscope.model.ops import op_name

    sampler = session.sampler

    def sampling() -> SamplingInputs:
        names = frozenset(op_name(o) for o in sampler.sampled_ops)
        costs = tuple((c.pid, c.share) for c in sampler.self_costs())
        covered, elapsed = sampler.coverage()
        return names, covered, elapsed, sampler.budget, costs

    def finding_counts() -> dict[tuple[str, str], int]:
        return {**explain.finding_counts(), **hangs.finding_counts()}

    source = TraceMetrics(session.node, session.stats.copy, session.tracer.counters, finding_counts, sampling=sampling)
    return start_exporters(plan, source)


def target_text(command: list[str], pids: list[int]) -> str:
    if command:
        return "command: " + " ".join(command)
    if pids:
        return "pids: " + ", ".join(map(str, pids))
    return "all processes that call CUDA"


def print_header(session: TraceSession, command: list[str], pids: list[int]) -> None:
    err = sys.stderr
    print(f"Tracing {target_text(command, pids)}", file=err)
    for att in session.attached:
        lib = att.library
        print(f"  {lib.kind:<6} {lib.path} {lib.version} ({att.probes} probes, {lib.found_via})", file=err)
    for lib in session.waiting:
        print(f"  {lib.kind:<6} {lib.path} {lib.version} ({lib.found_via}; attached at its first load)", file=err)
    if not session.attached and not session.waiting:
        print("  no CUDA library found yet: each one a process loads is attached at its first load", file=err)
    mode = "uprobe_multi" if session.tracer.multi else "classic uprobes (kernel lacks uprobe_multi)"
    host = ", ".join(session.tracer.host_links)
    print(f"  probes: {mode}; host: {host or 'off'}", file=err)
    sampler = session.sampler
    if sampler.budget is not None:
        print(
            f"  overhead budget {sampler.budget:.1%} of each process's CPU time: launches, memsets and async copies "
            f"probed in windows after the first {sampler.exact_first_s:g} s, their counts estimated "
            "(--record-all: every call)",
            file=err,
        )
    print(f"  database: {session.db_path}", file=err)
    print("Hit Ctrl-C to end.", file=err)
