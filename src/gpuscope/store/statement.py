"""A named SQL statement and its parameters, for a guarded reader to run.

Most store reads run their SQL themselves on the connection they are given.
Reads that must stay under a user-facing time limit (the Python API) are
handed back as a ``Statement`` instead, so the query engine runs them with
its deadline and error translation while the SQL text still lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Statement:
    """One read-only SQL statement and its positional parameters."""

    sql: str
    params: tuple[Any, ...] = ()
