"""The on-CPU profile as the API serves it: where the traced threads' CPU time went, in samples.

``profile_summary`` is the answer of ``GET /api/v1/profile`` (and, compacted,
of the MCP tool ``cpu_profile``): the hot functions
(``gpuscope.stacks.profile.top_functions``, as ``gpuscope stacks --cpu``
names them: the user's own code where a stack has it) and the stacks the
threads were sampled in most.
``flame`` in it is the samples' tree for a flame graph (``gpuscope.stacks.flame``).
``profile_speedscope`` is the speedscope file of the same samples. Both read
through one read-only connection the caller opens.

Every figure is a count of samples, each standing for 1/hz of a thread's CPU
time: shares and seconds are estimates, and the answer says so.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from gpuscope.analysis.engine import ExplainOptions, resolve_window
from gpuscope.model.session_choice import LAST_RUN, SessionChoice
from gpuscope.stacks.flame import flame_tree
from gpuscope.stacks.profile import cpu_profile, speedscope_document, top_functions
from gpuscope.store.cpu_samples_read import has_cpu_samples
from gpuscope.store.processes_read import process_rows

NO_SAMPLES = (
    "this recording holds no on-CPU samples (traced with --cpu-samples off or --no-stack, or by an older gpuscope)"
)
NONE_SELECTED = "no on-CPU samples of the traced threads in this window or process"
NO_RATE = "the recording does not say its sampling rate: shares of the samples only, no CPU seconds"


def _bounds(conn: sqlite3.Connection, since_ns: int | None, sessions: SessionChoice) -> tuple[int | None, int | None]:
    """The monotonic bounds of the sessions read, or their last ``since_ns`` (as explain counts them).

    None for both: the whole recording (every session, no window).
    """
    window = resolve_window(conn, ExplainOptions(since_ns=since_ns, sessions=sessions))
    if since_ns is None and window.part is None:
        return None, None
    return window.start_ns, window.end_ns


def estimate_note(hz: int) -> str:
    """What one sample stands for, said wherever a profile's figures are shown."""
    return f"counts of on-CPU samples, {hz} a second of each thread's CPU time: shares and seconds are estimates"


def profile_summary(
    conn: sqlite3.Connection,
    *,
    pid: int | None,
    since_ns: int | None,
    limit: int,
    sessions: SessionChoice = LAST_RUN,
) -> dict[str, Any]:
    """The hot functions and the top ``limit`` stacks of ``pid``'s samples (all processes' when None).

    ``since_ns``: only the last DURATION of the sessions read (the last run
    unless ``sessions``), counted back from their end as ``explain --since``
    does. An empty profile carries a note saying why it is empty.
    """
    start_ns, end_ns = _bounds(conn, since_ns, sessions)
    profile = cpu_profile(conn, pid=pid, start_ns=start_ns, end_ns=end_ns)
    total = profile.samples
    if total:
        notes = [estimate_note(profile.hz) if profile.hz else NO_RATE]
    else:
        notes = [NONE_SELECTED if has_cpu_samples(conn) else NO_SAMPLES]
    return {
        "hz": profile.hz or None,
        "samples": total,
        "estimated_cpu_s": round(profile.estimated_cpu_s(), 3) if profile.hz else None,
        "estimate": True,
        "top_functions": [h.as_dict() for h in top_functions(profile, limit)],
        "stacks": [
            {
                "pid": s.pid,
                "tid": s.tid,
                "samples": s.samples,
                "share": round(s.samples / total, 4),
                "frames": [f.render() for f in s.frames],  # innermost first, as `stacks` shows calls' stacks
            }
            for s in profile.stacks[:limit]
        ],
        # The flame graph's tree, processes named as the exporters name them.
        "flame": flame_tree(profile, {p: comm for p, comm, _ in process_rows(conn) if comm}),
        "notes": notes,
    }


def profile_speedscope(
    conn: sqlite3.Connection,
    *,
    pid: int | None,
    since_ns: int | None,
    name: str,
    sessions: SessionChoice = LAST_RUN,
) -> dict[str, object]:
    """The samples as a speedscope file named ``name``: one sampled profile per thread, weights in samples."""
    start_ns, end_ns = _bounds(conn, since_ns, sessions)
    profile = cpu_profile(conn, pid=pid, start_ns=start_ns, end_ns=end_ns)
    # Rows come oldest session first: the newest name of each pid wins, as the exporter names them.
    comms = {p: comm for p, comm, _ in process_rows(conn) if comm}
    return speedscope_document(profile, name, comms)
