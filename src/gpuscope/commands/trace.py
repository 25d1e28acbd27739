"""gpuscope trace: record CUDA API calls and host events of GPU processes."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import threading
from typing import TYPE_CHECKING, NoReturn, TextIO

from gpuscope.agent.launch import check_runnable
from gpuscope.agent.peers import Registration, running_peers
from gpuscope.agent.traced_command import TraceResult, trace_command
from gpuscope.commands._exporters import add_exporter_options, plan_exporters
from gpuscope.commands._options import add_db_option, duration_ns, duration_s, pid_arg
from gpuscope.commands._trace_setup import trace_plan
from gpuscope.errors import DatabaseError, PermissionDeniedError, ProcessNotFoundError, UsageError
from gpuscope.model.policy import DEFAULT_CPU_SAMPLE_HZ, WARMUP_ROWS_PER_S
from gpuscope.platform.standin import standin_env

if TYPE_CHECKING:
    from gpuscope.agent.late_loads import LateLoads
    from gpuscope.agent.options import TraceOptions
    from gpuscope.agent.tracer import Tracer


NAME = "trace"
HELP = "trace CUDA Runtime/Driver calls and host events into SQLite (needs root)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--pid", type=pid_arg, action="append", default=[], help="trace this process (repeatable)")
    p.add_argument(
        "--lib", action="append", default=[], metavar="PATH", help="probe only this CUDA library copy (repeatable)"
    )
    p.add_argument(
        "--standin",
        action="store_true",
        help="run the command on gpuscope's stand-in CUDA runtime (no GPU needed): a program that loads "
        "libcudart.so.12 by name gets the stand-in, first on its LD_LIBRARY_PATH",
    )
    p.add_argument(
        "-d", "--duration", help="stop after this long (e.g. 30s, 5m); default: until Ctrl-C or the command exits"
    )
    add_db_option(p, purpose="the recording to write; one that exists gets a new session", writes=True)
    p.add_argument("--node", help="node name stored with every event (default: hostname)")
    p.add_argument("--entry-only", action="store_true", help="record calls at entry only, without durations (cheapest)")
    p.add_argument("--no-host", action="store_true", help="no scheduler/process tracepoints")
    p.add_argument("--no-wakeups", action="store_true", help="do not record sched_wakeup events")
    p.add_argument(
        "--no-hold",
        action="store_true",
        help="do not stop a process at its first mapping of a CUDA library found after start "
        "(it is attached as fast as possible instead; its first calls may be missed)",
    )
    p.add_argument(
        "--alongside",
        action="store_true",
        help="trace every process even while another gpuscope agent on this host does (each call is then probed twice)",
    )
    p.add_argument(
        "--record-all",
        action="store_true",
        help="exact mode: probe every call all the time and store a row for every event "
        "(default: the overhead budget and selective storage, `gpuscope docs trace`)",
    )
    p.add_argument(
        "--budget",
        default="1%",
        metavar="PCT|off",
        help="keep the cost of the probes under this share of each traced process's CPU time by probing "
        "launches, memsets and async copies in windows, their counts then estimated (default 1%%; "
        "off: probe every call, as --record-all does)",
    )
    p.add_argument(
        "--keep-first",
        default="10s",
        metavar="DURATION",
        help="the first seconds of the trace, of each new process and of each library attached later are "
        "probed whole and every row is kept (default 10s; launches, copies, memsets and wakeups "
        f"up to {WARMUP_ROWS_PER_S:,} rows a second per process)",
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
        "--status-every",
        default="1s",
        metavar="DURATION",
        help="without the full-screen view: a status line this often (default 1s; 0 = none: findings as they "
        "appear and the summary only; e.g. 1m for a service's log)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per second: to -o FILE, or to stdout when no command is launched",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the JSON stream to FILE ('-' for stdout; implies --json). With `-- COMMAND` stdout is the "
        "command's: gpuscope writes only to stderr and FILE",
    )
    p.add_argument(
        "--stack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record the call stack (native and Python frames) of CUDA calls (default: on; `gpuscope docs stacks`)",
    )
    p.add_argument(
        "--python-stack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="include Python frames in stacks (default: on)",
    )
    p.add_argument(
        "--cpu-samples",
        default=None,
        metavar="HZ|off",
        help="sample the on-CPU stacks of traced threads this many times a second of their CPU time, to name the "
        f"code that holds the host while the GPU waits (default {DEFAULT_CPU_SAMPLE_HZ}, fewer under a budget "
        "below 0.5%%; its measured cost counts against --budget; needs --stack)",
    )
    p.add_argument(
        "--stack-every",
        action="append",
        default=[],
        metavar="OP=N",
        help="stack policy for one op: 0 no stacks, 1 a full stack on every call, N a full stack on the first call "
        "at each call site and on one call in N there (default 1024)",
    )
    p.add_argument(
        "--hang-threshold",
        default="30s",
        metavar="DURATION",
        help="live nccl-hang finding: a rank silent in NCCL this long while its peers go on (default 30s)",
    )
    add_exporter_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS: launch and trace a command")


def run(args: argparse.Namespace) -> int:
    from gpuscope.agent.options import GIL_SWITCH_S

    # From the start, not only once the session records: the probes load on a thread meanwhile.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_S)
    try:
        return _run(args)
    finally:
        sys.setswitchinterval(previous)


def _run(args: argparse.Namespace) -> int:
    command = _command(args)
    _require_bpf()
    json_out = _json_stream(args, command)
    try:
        return _trace(args, command, json_out)
    finally:
        if json_out is not None and json_out is not sys.stdout:
            with contextlib.suppress(OSError):
                json_out.close()


def _require_bpf() -> None:
    """Refuse before anything is created when this user cannot load BPF programs (no empty recording is left).

    Root is not asked: the one-millisecond test load would only repeat what
    loading the probes does, and a failure there is reported the same way.
    """
    if os.geteuid() == 0:
        return
    from gpuscope.bpf.features import probe_bpf_load

    if not probe_bpf_load().available:
        raise PermissionDeniedError(
            "trace needs root (or CAP_BPF and CAP_PERFMON) to load its probes; nothing was recorded",
            remedy="run `sudo gpuscope trace ...`: the recording still goes to your home, owned by you "
            "(`gpuscope check` shows what is missing)",
        )


def _json_stream(args: argparse.Namespace, command: list[str]) -> TextIO | None:
    """Where the JSON stream goes (None: no JSON): ``-o FILE``, or stdout when stdout is not the command's.

    Raises UsageError for ``--json`` with a command and no ``-o``: the
    command's output and the stream would interleave on one stdout.
    """
    if args.output is None and not args.json:
        return None
    if args.output is None or args.output == "-":
        if command and args.output is None:
            raise UsageError(
                "--json with a command: stdout is the command's, the JSON stream needs a file of its own",
                remedy="add -o FILE (e.g. -o trace.jsonl), or -o - to share stdout with the command",
            )
        return sys.stdout
    try:
        # Line-buffered: a reader following the file (`tail -f`) sees each second as it ends.
        return open(args.output, "w", buffering=1, encoding="utf-8")  # closed by _run
    except OSError as exc:
        raise UsageError(f"-o {args.output}: cannot write: {exc.strerror}") from None


def _trace(args: argparse.Namespace, command: list[str], json_out: TextIO | None) -> int:
    for pid in args.pid:
        if not os.path.exists(f"/proc/{pid}"):
            raise ProcessNotFoundError(f"no process with pid {pid}")
    for lib in args.lib:
        if not os.path.isfile(lib):
            raise UsageError(f"--lib {lib}: no such file")
    env = standin_env() if args.standin else None
    if args.standin and not command:
        raise UsageError("--standin runs a command on the stand-in runtime", remedy="add -- CMD")
    if command:
        check_runnable(command, env)  # before anything loads: a command that cannot run is not a recording
    duration = _duration(args.duration) if args.duration is not None else None
    # The live view posts once a second: a line every N posts.
    status_s = duration_s("--status-every", args.status_every, examples="1s, 1m, 0")
    status_every = 0 if status_s == 0 else max(1, round(status_s))
    exporters = plan_exporters(args)
    hang_threshold_ns = duration_ns("--hang-threshold", args.hang_threshold, examples="30s, 2m")
    plan = trace_plan(args, command, sys.argv)
    every_process = not command and not args.pid
    peers = running_peers()
    doubled = [p for p in peers if p.every_process and every_process]
    if doubled and not args.alongside:
        other = doubled[0]
        raise UsageError(
            f"another gpuscope agent (pid {other.pid}) already traces every process on this host, into "
            f"{other.db}: a second would probe every call twice",
            remedy=f"read its recording (gpuscope explain --db {other.db}), trace one command "
            "(gpuscope trace -- CMD), or add --alongside",
        )
    # Start-up waits mostly for the verifier: the probes load on a thread
    # from here, while the modules below are imported and the session opens
    # the recording and finds the libraries.
    from gpuscope.agent.background import Background

    imported = threading.Event()
    loading = Background(lambda: _load_tracer(plan.opts, imported), name="gpuscope-load")
    # Imports hold the GIL: ours beside the loader's would only delay the
    # verifier's start. Once the loader has its modules, the verifier runs in
    # the kernel and the imports below overlap it.
    imported.wait(_LOADER_IMPORTS_MAX_S)
    try:
        from gpuscope.commands._trace_watch import TraceWatch
        from gpuscope.render.summary import render_summary
    except BaseException:
        with contextlib.suppress(Exception):
            loading.result().close()
        raise
    watch = TraceWatch(
        args,
        command,
        json_out,
        status_every=status_every,
        exporters=exporters,
        hang_threshold_ns=hang_threshold_ns,
        peers=peers,
    )
    # It closes the probes if the session cannot open.
    with Registration(plan.db_path, every_process):
        result = trace_command(plan, command, watch, tracer=loading, duration_s=duration, env=env)
    if result.failure is not None:
        _recording_failed(result)
    session = result.session
    # After the last events were counted: a final scrape or push sees the full run.
    exported = watch.metrics.close() if watch.metrics is not None else []
    if watch.live is not None:
        watch.live.finish(result.counters, db_path=str(result.db_path), session_id=result.session_id)
    # Stdout belongs to the traced command (and to the JSON stream): the summary is for the person, on stderr.
    lines = [
        render_summary(
            session.stats.per_op,
            elapsed_s=result.elapsed_s,
            counters=result.counters,
            preempted=session.stats.preempted,
            others=session.stats.others,
            other_comms=session.stats.other_comms,
            stacks_unattributed=session.stacks.unattributed if session.stacks is not None else 0,
        ),
        *_late_load_lines(session.late_loads),
        *exported,
        f"\nrecorded to {result.db_path} (session {result.session_id}); next, for this run: "
        f"gpuscope explain --db {shlex.quote(str(result.db_path))} --session {result.session_id}",
    ]
    with contextlib.suppress(OSError):  # stderr closed (`2>&1 | head`): the recording is complete regardless
        print("\n".join(lines), file=sys.stderr, flush=True)
    return 0 if result.exit_status is None else result.exit_status


def _late_load_lines(late: LateLoads) -> list[str]:
    """What was attached after start, and how long processes were held for it."""
    from gpuscope.bpf.wire import HoldKind

    attached = sorted({load.path for load in late.loads if load.attached})
    lines = []
    if attached:
        held = [load.held_ms for load in late.loads if load.held is HoldKind.STOPPED]
        hold = f"; {len(held)} process(es) held at the load, longest {max(held):.1f} ms" if held else ""
        lines.append(f"attached after start: {', '.join(attached)}{hold}")
    lines.extend(f"gpuscope: a library loaded after start was not attached: {err}" for err in late.errors)
    if late.not_resumed:
        lines.append(
            f"gpuscope: not allowed to resume {len(late.not_resumed)} held process(es) (pid "
            f"{', '.join(map(str, late.not_resumed[:5]))}): each waited for the hold limit; "
            "another user's processes need CAP_KILL"
        )
    return lines


def _recording_failed(result: TraceResult) -> NoReturn:
    """The store failed: the recording is closed and the command, if any, has ended; say what was kept."""
    from gpuscope.commands._trace_watch import stopped_at

    session, reason = result.session, result.failure or "error"
    if result.exit_status is not None:
        print(f"gpuscope: the command exited with status {result.exit_status}", file=sys.stderr)
    remedy = (
        "free space there, or cap the recording below what is free: --max-db SIZE (the oldest rows go first)"
        if reason == "disk full"
        else "check the file system holding the recording, then record into a new file with --db PATH"
    )
    raise DatabaseError(
        f"{session.db_path}: recording stopped early ({reason}); it is closed and keeps "
        f"{session.writer.rows_written:,} event rows committed up to {stopped_at(session)}; "
        f"{session.writer.rows_lost:,} rows read after that were not stored, "
        f"{result.counters.get('dropped', 0):,} events dropped in the kernel",
        remedy=remedy,
    )


def _duration(text: str) -> float:
    """``-d``/``--duration`` in seconds; a recording's name there gets Ingero users a pointer (its ``-d`` is the db).

    0 is refused: no limit is leaving ``-d`` out, and a trace of nothing is no trace.
    """
    if text.endswith(".db") or os.path.isfile(text):
        raise UsageError(
            f"-d {text}: -d is the trace duration in gpuscope (e.g. -d 30s), not the recording",
            remedy=f"name the recording with --db {text}",
        )
    seconds = duration_s("--duration", text, examples="30s, 5m, 1m30s")
    if seconds <= 0:
        raise UsageError(
            f"--duration {text}: must be more than 0", remedy="e.g. -d 30s; leave -d out to trace until Ctrl-C"
        )
    return seconds


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    return command[1:] if command and command[0] == "--" else command


# The main thread waits at most this long for the loader's imports (normally ~100 ms).
_LOADER_IMPORTS_MAX_S = 1.0


def _load_tracer(opts: TraceOptions, imported: threading.Event) -> Tracer:
    """Load the probes. On the loading thread: it imports the tracer (numpy and the
    BPF loader) itself, so the verifier starts while the main thread imports the rest."""
    try:
        from gpuscope.agent.tracer import Tracer
    finally:
        imported.set()
    return Tracer(opts)
