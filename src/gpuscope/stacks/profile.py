"""On-CPU profiles: the samples of traced threads (gpuscope.store.cpu_samples) as stacks with counts.

``cpu_profile`` reads them; ``folded_lines`` writes the folded-stack text
that flame graph tools read (``flamegraph.pl``, inferno, speedscope), and
``speedscope_document`` a speedscope file with one sampled profile per
thread. Weights are sample counts: each stands for 1/hz of a thread's CPU
time, an estimate, so no exporter turns them into seconds.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from gpuscope._version import __version__
from gpuscope.stacks.frames import Frame, frames_from_json
from gpuscope.store.cpu_samples_read import sample_counts, sample_rate_hz, stack_frames_json

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


# Installed or standard-library code: the user's code is what calls it.
_LIBRARY = re.compile(r"(/(site|dist)-packages/|/lib/python3\.\d+/|^<frozen )")
_COMPREHENSION = re.compile(r"<(listcomp|dictcomp|setcomp|genexpr)>$")
# Data-pipeline functions worth naming even inside a library: the fix depends on them.
_PIPELINE = re.compile(r"(collate|pin_memory|__getitems?__|_next_data|fetch|tokeni[sz]e|encode)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class HotFunction:
    """A function the selected samples were in: ``share`` of them, at ``line`` most often."""

    function: str
    file: str | None
    line: int | None
    samples: int
    share: float
    python: bool

    def render(self) -> str:
        where = f" ({_short(self.file)}:{self.line})" if self.file else ""
        return f"`{self.function}`{where}"

    def as_dict(self) -> dict[str, object]:
        return {
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "samples": self.samples,
            "share": round(self.share, 3),
        }


@dataclass(frozen=True, slots=True)
class ProfileStack:
    """One distinct stack a thread was sampled in, ``frames`` innermost first, and how many samples."""

    pid: int
    tid: int
    samples: int
    frames: tuple[Frame, ...]


@dataclass(frozen=True, slots=True)
class CpuProfile:
    stacks: tuple[ProfileStack, ...]
    hz: int  # samples a second of a thread's CPU time; 0 when the recording does not say

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.stacks)

    def estimated_cpu_s(self) -> float:
        """The CPU time the samples stand for (an estimate: samples / hz); 0 when the rate is unknown."""
        return self.samples / self.hz if self.hz else 0.0


def cpu_profile(
    conn: sqlite3.Connection, *, pid: int | None = None, start_ns: int | None = None, end_ns: int | None = None
) -> CpuProfile:
    """The recording's on-CPU samples (of ``pid``, in [start_ns, end_ns] when given), most samples first."""
    counts = sample_counts(conn, pid=pid, start_ns=start_ns, end_ns=end_ns)
    texts = stack_frames_json(conn, sorted({h for _, _, h, _ in counts}))
    stacks = tuple(ProfileStack(p, t, n, frames_from_json(texts.get(h))) for p, t, h, n in counts)
    return CpuProfile(stacks, sample_rate_hz(conn))


def folded_lines(profile: CpuProfile, comms: dict[int, str] | None = None) -> Iterator[str]:
    """``process;thread;outermost;...;innermost count`` per stack (Brendan Gregg's folded format)."""
    merged: dict[str, int] = {}
    for s in profile.stacks:
        root = [f"{(comms or {}).get(s.pid) or 'pid'} {s.pid}", f"tid {s.tid}"]
        names = root + [frame_name(f) for f in reversed(s.frames)]
        key = ";".join(n.replace(";", ":").replace("\n", " ") for n in names)
        merged[key] = merged.get(key, 0) + s.samples
    for key, n in merged.items():
        yield f"{key} {n}"


def speedscope_document(profile: CpuProfile, name: str, comms: dict[int, str] | None = None) -> dict[str, object]:
    """A speedscope file: one sampled profile per thread, weights in samples."""
    frames: list[dict[str, object]] = []
    index: dict[tuple[str, str | None, int | None], int] = {}
    per_thread: dict[tuple[int, int], tuple[list[list[int]], list[int]]] = {}
    for s in profile.stacks:
        path = []
        for f in reversed(s.frames):  # speedscope wants the root first
            key = (frame_name(f), f.file or f.module, f.line)
            if key not in index:
                index[key] = len(frames)
                frame: dict[str, object] = {"name": key[0]}
                if key[1]:
                    frame["file"] = key[1]
                if key[2] is not None:
                    frame["line"] = key[2]
                frames.append(frame)
            path.append(index[key])
        samples, weights = per_thread.setdefault((s.pid, s.tid), ([], []))
        samples.append(path)
        weights.append(s.samples)
    profiles = []
    for (pid, tid), (samples, weights) in sorted(per_thread.items()):
        total = sum(weights)
        comm = (comms or {}).get(pid) or "pid"
        profiles.append(
            {
                "type": "sampled",
                "name": f"{comm} {pid} / tid {tid} ({total} samples" + (f" at {profile.hz}/s)" if profile.hz else ")"),
                "unit": "none",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            }
        )
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "name": name,
        "exporter": f"gpuscope {__version__}",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
    }


# A Python frame whose code object was never described to user space (its record was lost).
UNNAMED_PYTHON = "(unnamed Python code: its description was lost)"


def top_functions(profile: CpuProfile, limit: int = 10) -> list[HotFunction]:
    """The functions the profile's samples were in, most samples first (see ``count_functions``)."""
    return count_functions([(s.frames, s.samples) for s in profile.stacks], limit)


def count_functions(stacks: list[tuple[tuple[Frame, ...], int]], limit: int) -> list[HotFunction]:
    """Samples per function a user can act on, most first: for each stack, the innermost Python frame that is
    the user's own code (not the standard library or an installed package) or a data-pipeline function by
    name (``default_collate``, ``pin_memory``, ...), else the innermost Python frame, else the innermost
    named native frame. A function's line is the one its samples were at most often."""
    counts: dict[tuple[str, str | None, bool], dict[int | None, int]] = {}
    for frames, n in stacks:
        frame = _actionable(frames)
        name = frame.function or (UNNAMED_PYTHON if frame.kind == "python" else "?")
        key = (name, frame.file if frame.kind == "python" else frame.module, frame.kind == "python")
        lines = counts.setdefault(key, {})
        lines[frame.line] = lines.get(frame.line, 0) + n
    total = sum(n for _, n in stacks) or 1
    out = []
    for (fn, file, py), lines in counts.items():
        k = sum(lines.values())
        line = max(lines.items(), key=lambda kv: kv[1])[0]
        out.append(HotFunction(fn, file, line, k, k / total, py))
    out.sort(key=lambda h: (-h.samples, h.function))
    return out[:limit]


def _actionable(frames: tuple[Frame, ...]) -> Frame:
    """The frame of a stack that names code a user can act on (see ``count_functions``).

    Innermost first: the first Python frame that is the user's own code or a data-pipeline function by name
    (so a batch collated by ``default_collate`` inside the user's loop is named by it, not by the loop).
    """
    innermost = next((f for f in frames if f.kind == "python"), None)
    if innermost is not None and not innermost.function:
        # Its code object's description was lost (a full stack ring, counted as a dropped stack): the time is
        # this unnamed code's, not its caller's (naming the caller credited `main` with `log_metrics`'s time).
        return innermost
    # A comprehension or generator expression (its own frame before Python 3.12) is its function's code.
    py = [f for f in frames if f.kind == "python" and f.function and not _COMPREHENSION.search(f.function)]
    py = py or [f for f in frames if f.kind == "python" and f.function]
    for f in py:
        if (f.file and not _LIBRARY.search(f.file)) or _PIPELINE.search(f.function or ""):
            return f
    if py:
        return py[0]
    for f in frames:
        if f.function:
            return f
    return frames[0] if frames else Frame("native", "(unknown)")


def _short(path: str | None) -> str:
    """A source file as a user reads it beside a function's name: its file name."""
    return os.path.basename(path) if path else "?"


def frame_name(f: Frame) -> str:
    """A frame as a profile names it: a Python function by its name, a native one by its symbol (else its place)."""
    if f.kind == "python":
        return f.function or "?"
    return f.render() if not f.function else f.function
