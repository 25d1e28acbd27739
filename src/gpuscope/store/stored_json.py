"""JSON text read back from a recording: what gpuscope wrote, or nothing.

A column gpuscope fills with JSON (session flags, targets and drop counters,
stack frames, a finding's symptom) holds whatever a changed file put there.
Python's json parses arrays and objects recursively, so 200,000 nested
``[`` raise RecursionError, not the ValueError of other bad text: both mean
the value is not what gpuscope wrote, and readers take it as absent.
"""

from __future__ import annotations

import json


def stored_json(raw: object, default: object = None) -> object:
    """``raw`` parsed as JSON; ``default`` for NULL, empty text, a number or a blob that is not JSON text."""
    if not raw or not isinstance(raw, str | bytes):
        return default
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return default
