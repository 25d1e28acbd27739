"""Which sessions a reader looks at (``--session N|last|all``), resolved against a recording.

``last`` is the last *run*: the session that started last, with the session of
each other node that ran beside it (the nodes of a merged recording traced
together): that node's last session overlapping it in time. Sessions of one node
are never grouped: on one node each ``trace`` is its own run, and the demo's
scenarios, written one after another, each have a wall-clock span longer than
the time it took to write them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from gpuscope.errors import UsageError
from gpuscope.model.session_choice import SessionChoice, SessionScope

_NO_END = 2**63 - 1


@dataclass(frozen=True, slots=True)
class _Row:
    id: int
    node: str
    start_wall: int
    end_wall: int | None  # None: still recording (or never closed)
    start_mono: int
    end_mono: int | None


@dataclass(frozen=True, slots=True)
class ChosenSessions:
    """The sessions a reader looks at, out of every session of the file.

    ``mono_start``/``mono_end``: their span on the monotonic clock their rows
    are stamped with (``mono_end`` None while one of them is still open).
    """

    choice: SessionChoice
    ids: tuple[int, ...]
    every: tuple[int, ...]
    mono_start: int | None = None
    mono_end: int | None = None

    @property
    def whole(self) -> bool:
        """Every session of the file: nothing to filter."""
        return self.ids == self.every

    def part(self) -> str:
        """These sessions in words: ``session 3``, ``sessions 3, 4``."""
        return f"session{'s' if len(self.ids) > 1 else ''} {', '.join(map(str, self.ids))}"

    def note(self) -> str | None:
        """One line naming the sessions left out by default; None when none are, or ``--session`` was given."""
        if self.choice.given or self.whole:
            return None
        left = [i for i in self.every if i not in self.ids]
        mine = ", ".join(map(str, self.ids))
        return (
            f"note: session{'s' if len(self.ids) > 1 else ''} {mine} (the last run) of {len(self.every)}; "
            f"also in this file: {_id_list(left)} (--session all for every one, --session N for one)"
        )


def choose_sessions(conn: sqlite3.Connection, choice: SessionChoice) -> ChosenSessions:
    """Resolve ``choice`` against the file; raises UsageError for a session number it does not hold."""
    rows = [
        _Row(int(i), str(node), int(sw), _int(ew), int(sm), _int(em))
        for i, node, sw, ew, sm, em in conn.execute(
            "SELECT id, node, started_wall_ns, coalesce(stopped_wall_ns, committed_wall_ns), started_mono_ns, "
            "coalesce(stopped_mono_ns, committed_mono_ns) FROM sessions ORDER BY id"
        ).fetchall()
    ]
    every = tuple(r.id for r in rows)
    if choice.scope is SessionScope.ALL or not rows:
        chosen = rows
    elif choice.scope is SessionScope.ONE:
        chosen = [r for r in rows if r.id == choice.session_id]
        if not chosen:
            raise UsageError(
                f"--session {choice.session_id}: the recording has no such session (it has {_id_list(list(every))})",
                remedy='list them with `gpuscope query "SELECT id, node, argv FROM sessions"`',
            )
    else:
        chosen = _last_run(rows)
    ids = tuple(r.id for r in chosen)
    if not chosen:
        return ChosenSessions(choice, ids, every)
    ends = [r.end_mono for r in chosen]
    end = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    return ChosenSessions(choice, ids, every, min(r.start_mono for r in chosen), end)


def _last_run(rows: list[_Row]) -> list[_Row]:
    """The session that started last, and of each other node its last session that overlaps it in time."""
    last = max(rows, key=lambda r: (r.start_wall, r.id))
    last_end = _NO_END if last.end_wall is None else last.end_wall
    beside: dict[str, _Row] = {}
    for r in rows:
        end = r.end_wall if r.end_wall is not None else r.start_wall
        if r.node == last.node or r.start_wall > last_end or end < last.start_wall:
            continue
        # One run per node: its sessions follow one another, so the latest of those overlapping is the one.
        if r.node not in beside or (r.start_wall, r.id) > (beside[r.node].start_wall, beside[r.node].id):
            beside[r.node] = r
    chosen = {last.id, *(r.id for r in beside.values())}
    return [r for r in rows if r.id in chosen]


def _int(v: int | None) -> int | None:
    return None if v is None else int(v)


def _id_list(ids: list[int]) -> str:
    """``1–3, 5``: runs of consecutive ids folded; a long list cut with a count."""
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}–{ids[j]}")
        i = j + 1
    shown = ", ".join(parts) if len(parts) <= 6 else f"{', '.join(parts[:5])} and {len(parts) - 5} more"
    return f"session{'s' if len(ids) > 1 else ''} {shown}"
