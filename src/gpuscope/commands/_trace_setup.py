"""What `gpuscope trace` will record, checked from its arguments before anything is loaded.

The trace options (``TraceOptions``), the budget, the on-CPU sampling rate and
the recording's settings, as the session's plan (``SessionPlan``): every bad
value is a ``UsageError`` naming its flag, raised before a probe is loaded or
a file is created.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuscope.agent.session_plan import SessionPlan
from gpuscope.commands._options import db_from_args, duration_s, size_bytes
from gpuscope.config import check_node_name, load_config
from gpuscope.errors import UsageError
from gpuscope.model.policy import DEFAULT_CPU_SAMPLE_HZ, MAX_CPU_SAMPLE_HZ, SAMPLE_COST_S, SAMPLER_BUDGET_SHARE
from gpuscope.stacks.policy import parse_overrides, stack_policy

if TYPE_CHECKING:
    from gpuscope.agent.options import TraceOptions

MAX_RING_BYTES = 1 << 30  # a BPF ring buffer must be a power of two below 4 GiB; past 1 GiB it only costs memory


def trace_plan(args: argparse.Namespace, command: list[str], argv: Sequence[str]) -> SessionPlan:
    """Build the plan of a trace from its arguments; raises UsageError on a bad value.

    ``argv`` is the command line stored with the session.
    """
    opts = trace_options(args, command)
    max_db = size_bytes("--max-db", args.max_db)
    if 0 < max_db < (1 << 20):
        raise UsageError(f"--max-db {args.max_db}: too small (at least 1m, or 0 for no cap)")
    node = args.node if args.node is not None else load_config().get("node")
    if node is not None:
        check_node_name(node, "--node" if args.node is not None else "config node")
    budget = None if args.record_all else budget_arg(args.budget)
    db = db_from_args(args)
    return SessionPlan.build(
        opts,
        db,
        node=node,
        argv=argv,
        libraries=args.lib,
        command=command,
        record_all=args.record_all,
        max_db_bytes=max_db,
        keep_first_s=duration_s("--keep-first", args.keep_first),
        budget=budget,
    )


def trace_options(args: argparse.Namespace, command: list[str]) -> TraceOptions:
    """The tracer's options from the arguments."""
    from gpuscope.agent.options import TraceOptions

    ring = size_bytes("--ring-size", args.ring_size)
    if ring < 4096 or ring > MAX_RING_BYTES or ring & (ring - 1):
        raise UsageError(f"--ring-size {args.ring_size}: must be a power of two from 4k to 1g")
    budget = None if args.record_all else budget_arg(args.budget)
    if not args.stack:
        hz = 0  # samples are stacks
    elif args.cpu_samples is not None:
        hz = cpu_samples_arg(args.cpu_samples)
    else:
        hz = default_cpu_sample_hz(budget)
    return TraceOptions(
        # --lib names every library to trace: none is attached later.
        late_loads=not args.lib,
        hold=not args.no_hold,
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
        sampled_probes=budget is not None,
        cpu_sample_hz=hz,
    )


def default_cpu_sample_hz(budget: float | None) -> int:
    """The sampling rate when none is asked for: the default, or fewer where a small budget leaves less room.

    A sample costs up to ~25 µs of the sampled thread's time (bench/cpu_sample_bench.py): the sampler is
    given at most a quarter of the budget, so 49 a second down to a 0.5% budget, 10 at 0.1%.
    """
    if budget is None:
        return DEFAULT_CPU_SAMPLE_HZ
    return max(1, min(DEFAULT_CPU_SAMPLE_HZ, int(budget * SAMPLER_BUDGET_SHARE / SAMPLE_COST_S)))


def cpu_samples_arg(text: str) -> int:
    """``--cpu-samples``: samples a second (1 to 999), 0 for ``off``."""
    t = text.strip().lower()
    if t in ("off", "0", "none"):
        return 0
    try:
        hz = int(t.removesuffix("hz"))
    except ValueError:
        raise UsageError(f"--cpu-samples {text}: samples a second such as 49 or 99, or off") from None
    if not 1 <= hz <= MAX_CPU_SAMPLE_HZ:
        raise UsageError(f"--cpu-samples {text}: from 1 to {MAX_CPU_SAMPLE_HZ} a second (or off)")
    return hz


def budget_arg(text: str) -> float | None:
    """``--budget``: a share of CPU time as ``1%``, ``0.5%`` or ``0.01``; None for ``off``."""
    t = text.strip().lower()
    if t in ("off", "none", "0", "0%"):
        return None
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UsageError(f"--budget {text}: a share of CPU time such as 1% or 0.5%, or off") from None
    if not 0 < value < 0.5:
        raise UsageError(f"--budget {text}: between 0% and 50% (or off)")
    return value
