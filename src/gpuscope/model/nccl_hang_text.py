"""The words of an ``nccl-hang`` finding, one wording for explain's rule and the agent's live check."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.model.units import fmt_ns

MAX_PEERS_NAMED = 4


def rank_name(pid: int, rank: int | None, comm: str | None) -> str:
    """Name a rank in a sentence: its rank when known, its command and pid."""
    name = f"{comm}, pid {pid}" if comm else f"pid {pid}"
    return f"rank {rank} ({name})" if rank is not None else name


def peers_text(ahead: Sequence[tuple[str, int]]) -> str:
    """The peers that went on, (name, collectives more), as the finding lists them."""
    return ", ".join(f"{who} completed {n} more" for who, n in ahead[:MAX_PEERS_NAMED])


def in_flight_summary(
    who: str, silence_ns: int, exited: bool, stuck: str | None, ahead: Sequence[tuple[str, int]]
) -> str:
    """A rank silent in NCCL while its peers went on."""
    state = "until it exited" if exited else "so far"
    stuck_text = f" (stuck in or before {stuck})" if stuck else ""
    return (
        f"{who} has not returned from NCCL for {fmt_ns(silence_ns)} {state}{stuck_text} "
        f"while its peers went on: {peers_text(ahead)}"
    )


def returned_late_summary(who: str, op: str, duration_ns: int) -> str:
    """One NCCL call that returned only after the threshold."""
    return f"{who} was blocked in {op} for {fmt_ns(duration_ns)} before it returned"
