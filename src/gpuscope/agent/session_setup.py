"""Carry out a session's plan: find its libraries, and describe what it records in the session row.

``TraceSession.__init__`` calls these while the probes load; the loop and the
teardown stay in ``gpuscope.agent.session``.
"""

from __future__ import annotations

import os
import platform
import socket
import uuid

from gpuscope._version import __version__
from gpuscope.agent.discovery import Discovery
from gpuscope.agent.options import TraceOptions
from gpuscope.agent.session_plan import SessionPlan
from gpuscope.agent.tracer import Tracer
from gpuscope.bpf.features import can_hold_processes
from gpuscope.bpf.libbpf import libbpf
from gpuscope.model.ops import op_name
from gpuscope.model.policy import SAMPLED_PROBE_OPS
from gpuscope.store.retention import DEFAULT_MAX_DB
from gpuscope.store.sessions_write import SessionInfo


def db_cap_bytes(plan: SessionPlan) -> int:
    """The size the recording is kept under (0: no cap); the store's default where the plan names none."""
    return DEFAULT_MAX_DB if plan.max_db_bytes is None else plan.max_db_bytes


def find_libraries(plan: SessionPlan) -> Discovery:
    """The CUDA libraries the plan's targets may use: the named ones, a command's, or the system's."""
    discovery = Discovery()
    for path in plan.libraries:
        discovery.add(path, "--lib")
    if plan.libraries:
        return discovery
    if plan.command is not None:
        env = plan.discovery_env or os.environ
        discovery.scan_command(list(plan.command), dict(env))
    elif plan.scan_system:
        discovery.scan_system(dict(plan.discovery_env) if plan.discovery_env is not None else None)
        if not plan.opts.filter_targets:
            # System-wide: jobs already running (an agent restarted beside them) use libraries from
            # their own venvs and conda envs, found only in their memory maps.
            discovery.scan_all_processes()
    return discovery


def late_loads_mode(opts: TraceOptions, tracer: Tracer) -> str:
    """How libraries mapped after start are handled: hold, attach (no hold), rescan (not reported), off."""
    if not opts.late_loads:
        return "off"
    if tracer.late_loads_error is not None:
        return "rescan"
    return "hold" if opts.hold and can_hold_processes() else "attach"


def recorded_flags(plan: SessionPlan, tracer: Tracer) -> dict[str, object]:
    """The session row's flags: what the plan asked for, as far as the loaded probes could do it."""
    opts = plan.opts
    flags: dict[str, object] = {
        "entry_only": opts.entry_only,
        "filter_targets": opts.filter_targets,
        "host": opts.host,
        "uprobe_multi": tracer.multi,
        "ring_bytes": opts.ring_bytes,
        "storage": "all" if plan.record_all else "selective",
        "max_db_bytes": db_cap_bytes(plan),
        "stacks": ["off", "native", "native+python"][opts.stacks],
        "late_loads": late_loads_mode(opts, tracer),
        # The overhead budget (gpuscope.agent.sampling): None, every call is probed all the time.
        "budget": plan.budget if tracer.samples else None,
        "sampled_ops": sorted(op_name(o) for o in SAMPLED_PROBE_OPS) if tracer.samples else [],
        "exact_first_s": plan.keep_first_s if tracer.samples else None,
        # On-CPU samples per second of a thread's CPU time (0: none taken), and why none if asked for.
        "cpu_sample_hz": tracer.cpu_sample_hz,
    }
    if tracer.cpu_sampling_error:
        flags["cpu_sampling_error"] = tracer.cpu_sampling_error
    return flags


def session_info(plan: SessionPlan, flags: dict[str, object], *, wall_ns: int, mono_ns: int) -> SessionInfo:
    """The new session's row: this agent and host, the plan's flags, and when it started."""
    major, minor = libbpf().version()
    return SessionInfo(
        uuid=str(uuid.uuid4()),
        node=plan.node,
        hostname=socket.gethostname(),
        kernel=platform.release(),
        gpuscope_version=__version__,
        libbpf_version=f"{major}.{minor}",
        started_wall_ns=wall_ns,
        started_mono_ns=mono_ns,
        argv=list(plan.argv),
        flags=flags,
        agent_pid=os.getpid(),
    )
