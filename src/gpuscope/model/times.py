"""The one parser of points in time that every ``--from``/``--to`` uses.

A point is either an offset within the recording (from its start, or with
``end-``/``-`` from its end) or an absolute time (ISO 8601, or Unix seconds
as ``@1764130000`` or a bare number that large). A recording's start and end
are only known where it is read, so the point stays unresolved here.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from gpuscope.model.units import MAX_NS, parse_duration_ns

TIME_FORMS = (
    "an offset from the start of the sessions read (90s, 1m30s), from their end (end-30s), "
    "an ISO 8601 time (2026-01-02T03:04:05Z; local time without a zone) or Unix seconds (@1767323045)"
)

# A bare number this large cannot be an offset (31 years into a recording): it
# is a Unix time, as `date +%s` prints it. Smaller ones are offsets in seconds.
_UNIX_SECONDS_MIN = 1_000_000_000
_UNIX = re.compile(r"@?(\d+)(?:\.(\d{1,9}))?")


@dataclass(frozen=True, slots=True)
class TimePoint:
    """A point in a recording: an offset from its start, an offset back from its end, or a Unix time (ns).

    Exactly one of ``offset_ns`` (from the start), ``before_end_ns`` and
    ``wall_ns`` (nanoseconds since the Unix epoch) is set.
    """

    offset_ns: int | None = None
    wall_ns: int | None = None
    before_end_ns: int | None = None

    def resolve(self, start_ns: int, end_ns: int) -> int:
        """This point on the clock of ``start_ns``/``end_ns``, the recording's start and end on that clock.

        Kept within the signed 64-bit range the recording's times are compared
        in: an offset of 100,000 days lies after any recording's end, not past the
        largest number SQLite holds.
        """
        if self.wall_ns is not None:
            return self.wall_ns
        if self.before_end_ns is not None:
            point = end_ns - self.before_end_ns
        else:
            point = start_ns + int(self.offset_ns or 0)
        return max(-MAX_NS - 1, min(MAX_NS, point))

    def is_after(self, other: TimePoint) -> bool | None:
        """Whether this point lies after ``other`` in any recording; None when that depends on the recording.

        Two offsets from the start, two from the end, or two Unix times compare
        alone; an offset against a Unix time needs the recording's start and end.
        """
        if self.offset_ns is not None and other.offset_ns is not None:
            return self.offset_ns > other.offset_ns
        if self.wall_ns is not None and other.wall_ns is not None:
            return self.wall_ns > other.wall_ns
        if self.before_end_ns is not None and other.before_end_ns is not None:
            return self.before_end_ns < other.before_end_ns
        return None

    @classmethod
    def parse(cls, text: str, flag: str = "time") -> TimePoint:
        """Read any form of ``TIME_FORMS``; raises ValueError naming ``flag`` for anything else."""
        t = text.strip()
        unix = _UNIX.fullmatch(t)
        if unix and (t.startswith("@") or int(unix.group(1)) >= _UNIX_SECONDS_MIN):
            frac = (unix.group(2) or "").ljust(9, "0")
            wall_ns = int(unix.group(1)) * 1_000_000_000 + int(frac)
            if wall_ns > MAX_NS:
                raise ValueError(f"{flag}: time {text!r} is past the year 2262")
            return cls(wall_ns=wall_ns)
        lowered = t.lower()
        for prefix in ("end-", "-"):
            if lowered.startswith(prefix):
                try:
                    return cls(before_end_ns=parse_duration_ns(t[len(prefix) :]))
                except ValueError:
                    break
        try:
            return cls(offset_ns=parse_duration_ns(t.removeprefix("+")))
        except ValueError:
            pass
        try:
            when = dt.datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"{flag}: cannot read time {text!r}") from None
        if when.tzinfo is None:
            when = when.astimezone()
        # Integer arithmetic: a float timestamp in ns is only good to ~256 ns today.
        since_epoch = when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        seconds = since_epoch.days * 86_400 + since_epoch.seconds
        wall_ns = seconds * 1_000_000_000 + since_epoch.microseconds * 1_000
        if not -MAX_NS <= wall_ns <= MAX_NS:
            # Readers compare it with 64-bit times in SQL: past these years it would not fit.
            raise ValueError(f"{flag}: time {text!r} is outside the years 1677 to 2262")
        return cls(wall_ns=wall_ns)


def iso_utc(wall_ns: int, digits: int = 3) -> str:
    """A Unix time in ns as ISO 8601 UTC with ``digits`` decimals of a second, truncated (never later than it was)."""
    at = dt.datetime.fromtimestamp(wall_ns // 1_000_000_000, tz=dt.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S") + f".{wall_ns % 1_000_000_000 // 10 ** (9 - digits):0{digits}d}Z"
