"""kill: how much of a recording a SIGKILL at a random moment costs.

`gpuscope trace --record-all --no-tui` runs a workload and is SIGKILLed at a
random moment 1.5-4 s after it printed "Hit Ctrl-C to end.", N times per
workload:

  moderate    cudapace: cudaLaunchKernel at 20k calls/s, a load the agent keeps up with
  saturating  tests/workloads/cuda_hammer: two threads calling back to back (the ring overflows)

Each run, from the file left behind:

  by committed time   kill time - sessions.committed_wall_ns (the moment the
                      newest batch in the last commit was read)
  by events           (events read by the kill - rows in the file) / read rate
  survived            rows in the file / events read by the kill

Events read by the kill: the last once-a-second line before it
(`[    3s] 412,345 events (130,512/s), ...`), extrapolated at its rate; good
to a few % at a steady rate, to about one read batch (up to 131,072 events)
under overload. The two losses measure the same thing two ways: the first
trusts what the file says about itself, the second does not.

Target: all but the last 0.5 s survive. Reported, never enforced.
"""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import PYTHON, ROOT, STANDIN_CUDART, Result, build_c, build_hammer, median, use_source_bpf

TARGET_LOST_S = 0.5
MODERATE_RATE = 20_000
KILL_AFTER_S = (1.5, 4.0)
HEADER_END = "Hit Ctrl-C to end."
TICK = re.compile(r"^\[\s*(\d+)s\] ([\d,]+) events \(([\d,]+)/s\)")


@dataclass(frozen=True, slots=True)
class Tick:
    seen_s: float  # time.monotonic() when the line arrived
    elapsed_s: int  # the line's own "[    3s]"
    events: int
    rate: float


@dataclass(frozen=True, slots=True)
class Kill:
    """What one SIGKILLed run left behind."""

    after_s: float  # from the header to the kill
    lost_s: float | None  # kill - committed_wall_ns; None when nothing was committed
    rows: int
    read_estimate: int | None  # events read by the kill (None without a tick before it)
    read_rate: float  # events/s on the last tick line before the kill (0 without one)
    dropped_in_kernel: int  # as last committed (a lower bound)
    intact: bool

    @property
    def lost_by_events_s(self) -> float | None:
        """Events read but not in the file, in seconds of reading at the last tick's rate."""
        if self.read_estimate is None or self.read_rate <= 0:
            return None
        return (self.read_estimate - self.rows) / self.read_rate


class _StderrWatch:
    """Read the trace's stderr on a thread: the header, and each tick line with its arrival time."""

    def __init__(self, pipe) -> None:  # type: ignore[no-untyped-def]
        self.ready = threading.Event()
        self.ticks: list[Tick] = []
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
        self._thread.start()

    def _pump(self, pipe) -> None:  # type: ignore[no-untyped-def]
        for line in pipe:
            now = time.monotonic()
            self.lines.append(line)
            if HEADER_END in line:
                self.ready.set()
            m = TICK.match(line)
            if m:
                events, rate = int(m.group(2).replace(",", "")), float(m.group(3).replace(",", ""))
                self.ticks.append(Tick(now, int(m.group(1)), events, rate))

    def join(self) -> None:
        self._thread.join(timeout=10)


def _read_file(db: Path) -> tuple[int | None, int, int, bool]:
    """(committed_wall_ns, event rows, kernel drops as committed, integrity ok) of a killed recording."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        intact = conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        committed, dropped = conn.execute("SELECT committed_wall_ns, events_dropped FROM sessions").fetchone()
        (rows,) = conn.execute("SELECT count(*) FROM event_log").fetchone()
    finally:
        conn.close()
    return committed, int(rows), int(dropped or 0), intact


def _one_kill(command: list[str], db: Path, after_s: float) -> Kill:
    argv = [PYTHON, "-m", "gpuscope", "trace", "--db", str(db), "--lib", str(STANDIN_CUDART)]
    argv += ["--record-all", "--no-tui", "--", *command]
    # A session of its own: the workload outlives the killed agent, and the
    # group id ends exactly the processes started here.
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    watch = _StderrWatch(proc.stderr)
    try:
        if not watch.ready.wait(timeout=60):
            raise RuntimeError(f"gpuscope trace did not start: {''.join(watch.lines)[-500:]}")
        start = time.monotonic()
        time.sleep(after_s)
        if proc.poll() is not None:
            raise RuntimeError(f"gpuscope trace ended before the kill: {''.join(watch.lines)[-500:]}")
        killed_wall_ns, killed_mono = time.time_ns(), time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        watch.join()
    committed, rows, dropped, intact = _read_file(db)
    before = [t for t in watch.ticks if t.seen_s <= killed_mono]
    estimate, rate = None, 0.0
    if before:
        last = before[-1]
        # A line can show 0/s when the one before it came a moment earlier
        # (ticks catch up after a stall): then the average so far.
        rate = last.rate or last.events / max(last.elapsed_s, 1)
        estimate = last.events + int(rate * (killed_mono - last.seen_s))
    return Kill(
        after_s=killed_mono - start,
        lost_s=None if committed is None else (killed_wall_ns - int(committed)) / 1e9,
        rows=rows,
        read_estimate=estimate,
        read_rate=rate,
        dropped_in_kernel=dropped,
        intact=intact,
    )


def _lost_row(metric: str, lost: list[float], kills: list[Kill]) -> Result:
    """Median and max of seconds lost, beside the target, with every run's figure."""
    if not lost:
        return Result("kill", metric, "-", f"<= {TARGET_LOST_S} s", f"MISSED; no figure from {len(kills)} kills")
    verdict = "ok" if max(lost) <= TARGET_LOST_S and len(lost) == len(kills) else "MISSED"
    note = f"{verdict}; median, max {max(lost):.2f} s; each: {', '.join(f'{x:.2f}' for x in lost)} s"
    if len(lost) < len(kills):
        note += f"; {len(kills) - len(lost)} kills gave no figure"
    return Result("kill", metric, f"{median(lost):.2f} s", f"<= {TARGET_LOST_S} s", note)


def _rows_for(name: str, kills: list[Kill]) -> list[Result]:
    by_commit = [k.lost_s for k in kills if k.lost_s is not None]
    by_events = [x for k in kills if (x := k.lost_by_events_s) is not None]
    shares = [k.rows / k.read_estimate for k in kills if k.read_estimate]
    broken = sum(not k.intact for k in kills)
    drops = [k.dropped_in_kernel for k in kills]
    when = f"{len(kills)} kills at {min(k.after_s for k in kills):.1f}-{max(k.after_s for k in kills):.1f} s"
    return [
        _lost_row(f"{name}: lost at the end, by committed time", by_commit, kills),
        _lost_row(f"{name}: lost at the end, by events", by_events, kills),
        Result(
            "kill",
            f"{name}: events read that survived",
            f"{median(shares) * 100:.1f} %" if shares else "-",
            "",
            (f"median, min {min(shares) * 100:.1f} %; " if shares else "")
            + f"{when}; {sum(k.rows for k in kills):,} rows of ~{sum(k.read_estimate or 0 for k in kills):,} read; "
            f"kernel drops as committed {min(drops):,}-{max(drops):,}; "
            + (f"{broken} files failed integrity_check" if broken else "every file intact"),
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    """SIGKILL `gpuscope trace` at random moments under a steady and a saturating load; report what survived."""
    if not STANDIN_CUDART.is_file():
        raise RuntimeError(f"stand-in libcudart not found at {STANDIN_CUDART} (python scripts/build_native.py)")
    note_src = use_source_bpf()
    reps = 3 if quick else 6
    pace = build_c("cudapace", ["-ldl"])
    hammer = build_hammer()
    workloads = {
        f"moderate ({MODERATE_RATE // 1000}k calls/s)": [str(pace), str(MODERATE_RATE), "60", str(STANDIN_CUDART)],
        "saturating (cuda_hammer, 2 threads)": [str(hammer), "20000000", "2"],
    }
    rng = random.Random()
    rows: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-", dir="/var/tmp") as tmp:
        for w, (name, command) in enumerate(workloads.items()):
            kills = [
                _one_kill(command, Path(tmp) / f"load{w}-kill{i}.db", rng.uniform(*KILL_AFTER_S)) for i in range(reps)
            ]
            rows += _rows_for(name, kills)
    rows.append(
        Result("kill", "(setup)", "", "", f"{note_src}; --record-all, stand-in libcudart, {reps} kills per load")
    )
    return rows
