"""gpuscope trace: record CUDA API calls and host events of GPU processes."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import NoReturn

from gpuscope.agent.launch import StopSignals, finish, launch_held
from gpuscope.agent.session import TraceSession
from gpuscope.agent.tracer import TraceOptions
from gpuscope.analysis.recording_state import iso_wall
from gpuscope.commands._options import add_db_option, db_from_args, duration_s, size_bytes
from gpuscope.config import load_config
from gpuscope.errors import DatabaseError, NoCudaLibraryError, ProcessNotFoundError, UsageError
from gpuscope.render.summary import render_summary
from gpuscope.stacks.policy import parse_overrides, stack_policy
from gpuscope.tui.explain_source import ExplainFindings
from gpuscope.tui.findings import builtin_findings
from gpuscope.tui.output import LiveOutput, OutputMode, choose_mode

NAME = "trace"
HELP = "trace CUDA Runtime/Driver calls and host events into SQLite (needs root)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--pid", type=int, action="append", default=[], help="trace this process (repeatable)")
    p.add_argument(
        "--lib", action="append", default=[], metavar="PATH", help="probe only this CUDA library copy (repeatable)"
    )
    p.add_argument(
        "-d", "--duration", help="stop after this long (e.g. 30s, 5m); default: until Ctrl-C or the command exits"
    )
    add_db_option(p, purpose="the recording to write; one that exists gets a new session")
    p.add_argument("--node", help="node name stored with every event (default: hostname)")
    p.add_argument("--entry-only", action="store_true", help="record calls at entry only, without durations (cheapest)")
    p.add_argument("--no-host", action="store_true", help="no scheduler/process tracepoints")
    p.add_argument("--no-wakeups", action="store_true", help="do not record sched_wakeup events")
    p.add_argument(
        "--record-all",
        action="store_true",
        help="store a row for every event (default: selective, see docs/storage.md)",
    )
    p.add_argument(
        "--keep-first",
        default="10s",
        metavar="DURATION",
        help="selective storage keeps every row this long (default 10s)",
    )
    p.add_argument(
        "--max-db", default="10g", metavar="SIZE", help="keep the database under SIZE (e.g. 500m; 0 = no cap)"
    )
    p.add_argument("--no-io", action="store_true", help="no block I/O tracepoints")
    p.add_argument("--no-tcp", action="store_true", help="no TCP retransmit tracepoint")
    p.add_argument("--no-memory", action="store_true", help="no page allocation / reclaim / OOM tracepoints")
    p.add_argument("--ring-size", default="32m", help="ring buffer size, a power of two (default 32m)")
    p.add_argument("--classic-uprobes", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-tui", action="store_true", help="no full-screen view: one plain line per second on stderr")
    p.add_argument(
        "--json", action="store_true", help="one JSON object per second on stdout (the summary goes to stderr)"
    )
    p.add_argument(
        "--stack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record the call stack (native and Python frames) of CUDA calls (default: on; see docs/stacks.md)",
    )
    p.add_argument(
        "--python-stack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="include Python frames in stacks (default: on)",
    )
    p.add_argument(
        "--stack-every",
        action="append",
        default=[],
        metavar="OP=N",
        help="stack policy for one op: 0 never, 1 every call, N one call in N (default: launches 1 in 64)",
    )
    p.add_argument(
        "--hang-threshold",
        default="30s",
        metavar="DURATION",
        help="live nccl-hang finding: a rank silent in NCCL this long while its peers go on (default 30s)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS: launch and trace a command")


def run(args: argparse.Namespace) -> int:
    command = _command(args)
    for pid in args.pid:
        if not os.path.exists(f"/proc/{pid}"):
            raise ProcessNotFoundError(f"no process with pid {pid}")
    for lib in args.lib:
        if not os.path.isfile(lib):
            raise UsageError(f"--lib {lib}: no such file")
    duration = duration_s("--duration", args.duration) if args.duration else None
    hang_threshold_ns = int(duration_s("--hang-threshold", args.hang_threshold, examples="30s, 2m") * 1e9)
    session = _session(args, command)
    proc: subprocess.Popen[bytes] | None = None
    try:
        for pid in args.pid:
            session.add_target(pid)
        if not session.attached:
            raise NoCudaLibraryError("no CUDA library (libcudart / libcuda) found to attach to")
        _print_header(session, command, args.pid)
        mode = choose_mode(no_tui=args.no_tui, json=args.json, stdout_is_tty=sys.stdout.isatty())
        # Explain rules over the recent recording, beside the built-in live findings.
        explain = ExplainFindings(session.db_path, hang_threshold_ns=hang_threshold_ns)
        live = LiveOutput(
            session, mode, _target_text(command, args.pid), findings=[*builtin_findings(session.flags), explain]
        )
        if command:
            proc = launch_held(command, lambda pid: session.add_target(pid, before_exec=True))
        deadline = time.monotonic() + duration if duration else None
        with StopSignals() as stop:

            def should_stop() -> bool:
                if stop.requested or (deadline is not None and time.monotonic() >= deadline):
                    return True
                return proc is not None and proc.poll() is not None

            try:
                with live:
                    session.run(should_stop, live.on_tick)
            finally:
                # An evaluation still running on its thread would be torn down
                # mid-numpy at interpreter exit (abort): let it finish first.
                explain.close()
            if session.failure is not None:
                _recording_failed(session, proc, command, stop)
        exit_code = finish(proc, signum=stop.signum or signal.SIGINT) if proc is not None else 0
    except BaseException as exc:
        session.finish()
        if proc is not None and proc.poll() is None and not isinstance(exc, KeyboardInterrupt):
            # The tracer failed, not the workload: it is left to run (detached
            # from the probes by finish()), and the user is told where it is.
            print(f"gpuscope: `{' '.join(command)}` (pid {proc.pid}) runs on untraced", file=sys.stderr)
        raise
    elapsed = time.monotonic() - session._t0
    counters = session.finish()
    live.finish(counters, db_path=str(session.db_path), session_id=session.session_id)
    # Machine formats keep stdout for themselves: the human summary goes to stderr.
    out = sys.stderr if mode is OutputMode.JSON else sys.stdout
    print(
        render_summary(session.stats.per_op, elapsed_s=elapsed, counters=counters, preempted=session.stats.preempted),
        file=out,
    )
    print(f"\nrecorded to {session.db_path} (session {session.session_id}); run `gpuscope explain` next", file=out)
    return exit_code


def _recording_failed(
    session: TraceSession, proc: subprocess.Popen[bytes] | None, command: list[str], stop: StopSignals
) -> NoReturn:
    """The store failed: close the recording now, leave the workload unharmed, then say what was kept.

    Detaching first means the workload runs on at full speed; it is never
    killed because the tracer failed. A launched command is waited for (Ctrl-C
    and SIGTERM still reach it), so scripts that run ``gpuscope trace -- CMD``
    see it end before gpuscope does.
    """
    reason = session.failure or "error"
    counters = session.finish()
    kept = session.writer.rows_written
    lost = session.writer.rows_lost
    # The same "complete up to" time explain and query will show for this session.
    at = iso_wall(session.committed_wall_ns) or "its start"
    what = f"the file system of {session.db_path} is full" if reason == "disk full" else reason
    print(f"\ngpuscope: recording stopped at {at}: {what}", file=sys.stderr)
    if proc is not None:
        if proc.poll() is None:
            print(
                f"gpuscope: `{' '.join(command)}` (pid {proc.pid}) runs on untraced; waiting for it to end "
                "(Ctrl-C stops it)",
                file=sys.stderr,
            )
        while proc.poll() is None and not stop.requested:
            time.sleep(0.2)
        status = finish(proc, signum=stop.signum or signal.SIGINT)
        print(f"gpuscope: the command exited with status {status}", file=sys.stderr)
    remedy = (
        "free space there, or cap the recording below what is free: --max-db SIZE (the oldest rows go first)"
        if reason == "disk full"
        else "check the file system holding the recording, then record into a new file with --db PATH"
    )
    raise DatabaseError(
        f"{session.db_path}: recording stopped early ({reason}); it is closed and keeps {kept:,} event rows "
        f"committed up to {at}; {lost:,} rows read after that were not stored, "
        f"{counters.get('dropped', 0):,} events dropped in the kernel",
        remedy=remedy,
    )


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    return command[1:] if command and command[0] == "--" else command


def _trace_options(args: argparse.Namespace, command: list[str]) -> TraceOptions:
    ring = size_bytes("--ring-size", args.ring_size)
    if ring < 4096 or ring & (ring - 1):
        raise UsageError(f"--ring-size {args.ring_size}: must be a power of two of at least 4k")
    return TraceOptions(
        filter_targets=bool(args.pid or command),
        entry_only=args.entry_only,
        host=not args.no_host,
        wakeups=not args.no_wakeups,
        ring_bytes=ring,
        force_classic_uprobes=args.classic_uprobes,
        io=not args.no_io,
        tcp=not args.no_tcp,
        memory=not args.no_memory,
        stacks=(2 if args.python_stack else 1) if args.stack else 0,
        stack_policy=stack_policy(overrides=parse_overrides(args.stack_every)),
    )


def _session(args: argparse.Namespace, command: list[str]) -> TraceSession:
    """Open the recording and load the probes (nothing is attached to a process yet)."""
    opts = _trace_options(args, command)
    max_db = size_bytes("--max-db", args.max_db)
    if 0 < max_db < (1 << 20):
        raise UsageError(f"--max-db {args.max_db}: too small (at least 1m, or 0 for no cap)")
    node = args.node or load_config().get("node")
    if node is not None and (":" in node or not node.strip()):
        raise UsageError(f"--node {node!r}: a node name must be non-empty and may not contain ':'")
    return TraceSession(
        opts,
        db_from_args(args),
        node=node,
        argv=sys.argv,
        record_all=args.record_all,
        max_db_bytes=max_db,
        keep_first_s=duration_s("--keep-first", args.keep_first),
        libraries=args.lib,
        command=command or None,
    )


def _target_text(command: list[str], pids: list[int]) -> str:
    if command:
        return "command: " + " ".join(command)
    if pids:
        return "pids: " + ", ".join(map(str, pids))
    return "all processes that call CUDA"


def _print_header(session: TraceSession, command: list[str], pids: list[int]) -> None:
    err = sys.stderr
    print(f"Tracing {_target_text(command, pids)}", file=err)
    for att in session.attached:
        lib = att.library
        print(f"  {lib.kind:<6} {lib.path} {lib.version} ({att.probes} probes, {lib.found_via})", file=err)
    mode = "uprobe_multi" if session.tracer.multi else "classic uprobes (kernel lacks uprobe_multi)"
    host = ", ".join(session.tracer.host_links)
    print(f"  probes: {mode}; host: {host or 'off'}", file=err)
    print(f"  database: {session.db_path}", file=err)
    print("Hit Ctrl-C to end.", file=err)
