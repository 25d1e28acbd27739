"""Which sessions of a recording a reader looks at: ``--session N|last|all``.

Every ``trace`` into a recording adds a session. A reader that analysed all of
them together would mix runs (and a failed launch with a good one), so every
reader looks at the *last* run unless told otherwise: the session that started
last, with every session that ran at the same time beside it (the other nodes
of a merged recording). ``all`` is every session; ``N`` is session N alone.
Resolved against a file by ``gpuscope.store.sessions_read.choose_sessions``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpuscope.model.limits import SESSION_ID_MAX

SESSION_FORMS = "a session number (1, 2, …), last (the last run, the default) or all"


class SessionScope(enum.Enum):
    LAST = "last"
    ALL = "all"
    ONE = "one"


@dataclass(frozen=True, slots=True)
class SessionChoice:
    """``--session`` as parsed: the scope, the session of ``ONE``, and whether the user gave it.

    ``given`` is False for the default: readers then mention the sessions they
    left out, in one line.
    """

    scope: SessionScope = SessionScope.LAST
    session_id: int | None = None
    given: bool = False

    @classmethod
    def parse(cls, text: str) -> SessionChoice:
        """Read ``N``, ``last`` or ``all``; raises ValueError for anything else."""
        word = text.strip().lower()
        if word in ("last", "all"):
            return cls(SessionScope(word), None, True)
        if word.isdigit() and 1 <= int(word) <= SESSION_ID_MAX:
            return cls(SessionScope.ONE, int(word), True)
        raise ValueError(f"{text!r}: not {SESSION_FORMS}")

    def __str__(self) -> str:
        return str(self.session_id) if self.scope is SessionScope.ONE else self.scope.value


LAST_RUN = SessionChoice()
EVERY_SESSION = SessionChoice(SessionScope.ALL, None, True)
