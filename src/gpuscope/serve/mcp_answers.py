"""The MCP tools' compact answers: findings, ops and CPU profiles cut to what an assistant needs.

An assistant pays per token: by default a tool answers with these few keys
(``verbose`` gives the API's whole shape instead).
"""

from __future__ import annotations

from typing import Any

from gpuscope.model.finding_wire import FindingWire

# cpu_profile's answer: at most this many frames of each stack (the innermost).
MAX_PROFILE_FRAMES = 12


def compact_finding(f: FindingWire) -> dict[str, Any]:
    """A finding in a few keys: what an assistant needs to pick one to look into (verbose: the whole wire shape)."""
    s = f["symptom"]
    return {
        "id": f["id"],
        "sev": f["severity"],
        "kind": f["kind"],
        "summary": s["summary"],
        "pid": s.get("pid"),
        "comm": s.get("comm"),
        "op": s.get("op"),
        "evidence": [line for c in f["causes"] for line in c["evidence"]][:6],
        "fix": f["fix"],
    }


def compact_op(o: dict[str, Any]) -> dict[str, Any]:
    keys = ("op", "count", "rate_per_s", "p50_ns", "p99_ns", "max_ns", "time_share")
    out = {k: o.get(k) for k in keys}
    if o.get("estimated"):
        # Probed in windows under the overhead budget: the count, rate and share are estimates.
        out.update(estimated=True, coverage=o.get("coverage"))
    return out


def compact_profile(d: dict[str, Any]) -> dict[str, Any]:
    """The API's profile with each stack cut to its innermost frames (the rest counted, not shown)."""
    stacks = []
    for s in d["stacks"]:
        frames = s["frames"]
        stack = {k: s[k] for k in ("pid", "tid", "samples", "share")}
        stack["frames"] = frames[:MAX_PROFILE_FRAMES]
        if len(frames) > MAX_PROFILE_FRAMES:
            stack["more_frames"] = len(frames) - MAX_PROFILE_FRAMES
        stacks.append(stack)
    keys = ("hz", "samples", "estimated_cpu_s", "estimate", "top_functions")
    return {**{k: d[k] for k in keys}, "stacks": stacks, "notes": d["notes"]}
