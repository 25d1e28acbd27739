"""Is an op id one of a set of ops? One table lookup per row, for columns of millions of op ids.

``np.isin`` sorts both arrays for every call; the analysis frame and the
column-block reader ask it of the same few op sets over and over.
"""

from __future__ import annotations

import functools

import numpy as np

# Op ids are 1 .. 65,534: the writer stores 16 bits, and 0 is no op. Ids outside the table are clipped to
# its first or last entry, which no set holds, so they read False.
_TABLE_SIZE = 1 << 16


def in_ops(op: np.ndarray, ops: frozenset[int]) -> np.ndarray:
    """``np.isin(op, ops)`` for a column of op ids, at one gather per row."""
    found: np.ndarray = np.take(_table(ops), op, mode="clip")
    return found


@functools.lru_cache(maxsize=64)
def _table(ops: frozenset[int]) -> np.ndarray:
    table = np.zeros(_TABLE_SIZE, dtype=bool)
    table[[o for o in ops if 0 < o < _TABLE_SIZE - 1]] = True
    return table
