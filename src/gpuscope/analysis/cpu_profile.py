"""Where the host's time goes: on-CPU samples of traced threads, read as a profile.

A sample is the stack a traced thread was running when the kernel's cpu-clock
fired (gpuscope.store.cpu_samples): ``hz`` samples a second of the thread's CPU
time, so a function's share of the samples in some interval is its share of the
CPU time spent there, and samples x 1/hz estimates that time. Profiles are
estimates from counts, and say so.

``hot_functions`` names the code a user can act on: per sample, the innermost
Python frame of the user's own code (not the standard library or an installed
package), or a data-pipeline function by name (``default_collate``,
``pin_memory``, ...), else the innermost Python frame, else the innermost named
native frame. ``host_fix`` turns what was found into a fix for that code.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

import numpy as np

from gpuscope.model.findings import Cause
from gpuscope.model.units import fmt_ns
from gpuscope.stacks.frames import Frame, frames_from_json
from gpuscope.stacks.profile import HotFunction, count_functions
from gpuscope.store.cpu_samples_read import SampleColumns, sample_columns, stack_frames_json

MIN_SAMPLES = 10


@dataclass(frozen=True)
class CpuSamples:
    """A window's on-CPU samples and the stacks they ran: ``stack`` indexes ``stacks``."""

    ts: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    stack: np.ndarray
    stacks: tuple[tuple[Frame, ...], ...]
    hz: int

    def __len__(self) -> int:
        return len(self.ts)

    def within(self, pids: set[int], starts: np.ndarray, ends: np.ndarray, tids: set[int] | None = None) -> np.ndarray:
        """Positions of the samples of ``pids`` (and ``tids``, when given) inside any [start, end) interval."""
        if not len(self.ts) or not len(starts):
            return np.zeros(0, dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
        # Intervals may overlap: a sample is inside when the latest interval starting at or before it reaches it.
        reach = np.maximum.accumulate(e)
        i = np.searchsorted(s, self.ts, side="right") - 1
        inside = (i >= 0) & (self.ts < reach[np.maximum(i, 0)])
        inside &= np.isin(self.pid, np.fromiter(pids, dtype=np.int64))
        if tids is not None:
            inside &= np.isin(self.tid, np.fromiter(tids, dtype=np.int64))
        return np.flatnonzero(inside)

    def estimated_ns(self, n: int) -> int:
        """CPU time that ``n`` samples stand for (0 when the rate is unknown)."""
        return n * 1_000_000_000 // self.hz if self.hz > 0 else 0


def load_cpu_samples(conn: sqlite3.Connection, start_ns: int, end_ns: int, pids: tuple[int, ...] = ()) -> CpuSamples:
    """The samples taken in the window, with their stacks decoded once each."""
    cols: SampleColumns = sample_columns(conn, start_ns, end_ns, pids)
    uniq, index = np.unique(cols.stack_hash, return_inverse=True)
    texts = stack_frames_json(conn, [int(h) for h in uniq.tolist()])
    stacks = tuple(frames_from_json(texts.get(int(h))) for h in uniq.tolist())
    return CpuSamples(cols.ts_ns, cols.pid, cols.tid, index.reshape(-1).astype(np.int64), stacks, cols.hz)


def hot_functions(samples: CpuSamples, positions: np.ndarray, limit: int = 3) -> list[HotFunction]:
    """The functions the selected samples were in, most samples first (see ``count_functions``)."""
    if not len(positions):
        return []
    per_stack = np.bincount(samples.stack[positions], minlength=len(samples.stacks))
    nz = np.flatnonzero(per_stack).tolist()
    return count_functions([(samples.stacks[i], int(per_stack[i])) for i in nz], limit)


def describe_hot(hot: list[HotFunction], total: int, what: str) -> str:
    """One line: "71% of the samples in the idle gaps (137) in `__getitem__` (data.py:42); 22% in ..."."""
    head = hot[0]
    text = f"{head.share:.0%} of the {total} on-CPU samples {what} in {head.render()}"
    if len(hot) > 1:
        text += "; " + ", ".join(f"{h.share:.0%} in {h.render()}" for h in hot[1:])
    return text


def host_fix(hot: list[HotFunction], *, feeder_holds_it: bool) -> str:
    """A fix for the code the host time goes to: specific to what the samples named."""
    if not hot:
        return ""
    # The fix is for the code that holds the most: the top function decides it.
    names = hot[0].function.lower()
    where = hot[0].render()
    if "__getitem__" in names:
        fix = (
            f"the batch is built one sample at a time in {where}: give the Dataset `__getitems__` (batched "
            "indexing, one call per batch), and load in DataLoader workers (num_workers > 0, prefetch_factor)"
        )
    elif "collate" in names:
        fix = (
            f"collating is the hot spot ({where}): return tensors (not lists or dicts of Python numbers) from "
            "the Dataset so collation is one stack, or collate in the workers with a batched collate_fn"
        )
    elif re.search(r"tokeni[sz]|encode", names):
        fix = (
            f"tokenizing holds the host ({where}): tokenize ahead (once, offline, or in DataLoader workers) "
            "with a fast batched tokenizer"
        )
    elif re.search(r"transform|augment|resize|decode|normalize|to_tensor|totensor", names):
        fix = (
            f"the transform holds the host ({where}): move it to the GPU (torchvision.transforms.v2 on CUDA "
            "tensors, DALI) or precompute it"
        )
    elif "pin_memory" in names or "copy" in names:
        fix = f"host copies hold the host ({where}): pin_memory=True and non_blocking=True copies"
    else:
        fix = (
            f"make {where} cheaper (vectorise it, cache its result) or take it off the GPU's feeding thread "
            "(DataLoader workers, a prefetching thread) so it overlaps GPU work"
        )
    if feeder_holds_it and not re.search(r"num_workers|workers", fix):
        fix += "; it runs on the thread that feeds the GPU: DataLoader workers (num_workers > 0) overlap it"
    return fix


HOST_TIME = "host-time"


@dataclass(frozen=True, slots=True)
class HostTime:
    """Where the host's CPU time went in some intervals: the cause, a fix for that code, the top functions."""

    cause: Cause
    fix: str
    hot: tuple[HotFunction, ...]


def host_time_cause(
    samples: CpuSamples | None,
    pids: set[int],
    starts: np.ndarray,
    ends: np.ndarray,
    feeder_tids: set[int],
    what: str = "taken while the GPU waited",
) -> HostTime | None:
    """Where the host's CPU time went in the given intervals, and a fix for that code; None without enough samples.

    ``pids``: the process and its own workers (forked children); ``feeder_tids``: the threads that make the
    GPU calls. The cause lists the top functions with their share of the samples, and how many of the samples
    were on the feeding thread (work nothing overlaps) rather than on its other threads or workers.
    """
    if samples is None or not len(samples):
        return None
    pos = samples.within(pids, starts, ends)
    if len(pos) < MIN_SAMPLES:
        return None
    hot = hot_functions(samples, pos, limit=3)
    on_feeder = float(np.isin(samples.tid[pos], np.fromiter(feeder_tids, dtype=np.int64)).mean())
    est = samples.estimated_ns(len(pos))
    lines = (
        describe_hot(hot, len(pos), what),
        f"{on_feeder:.0%} of these samples on the thread that feeds the GPU"
        + ("" if on_feeder > 0.99 else ", the rest on its other threads and worker processes"),
        f"≈{fmt_ns(est)} of CPU time, estimated from {len(pos)} samples at {samples.hz} a second"
        if est
        else f"{len(pos)} samples (rate not recorded: no time estimate)",
    )
    metrics: dict[str, float | int] = {
        "host_samples": len(pos),
        "host_top_share": round(hot[0].share, 3),
        "host_feeder_share": round(on_feeder, 3),
    }
    return HostTime(
        Cause(HOST_TIME, lines, metrics=metrics), host_fix(hot, feeder_holds_it=on_feeder >= 0.5), tuple(hot)
    )
