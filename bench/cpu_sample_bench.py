"""On-CPU sampling's cost to a busy Python thread: a host-bound loop untraced and traced at 0, 49, 99 and 199 Hz.

    sudo .venv/bin/python bench/cpu_sample_bench.py [--rounds 3] [--seconds 10] [--quick]

The loop is bench/py_host_loop.py: each step ~20 ms of pure Python (a batch built item by item, 12 Python
frames below ``main``), then four ``cudaLaunchKernel`` and a ``cudaStreamSynchronize`` through ctypes into a
private copy of the stand-in libcudart. It runs pinned to CPU 1; ``gpuscope trace`` runs as typed, pinned to
CPU 0 (``trace --no-tui --lib COPY --cpu-samples HZ -- taskset -c 1 python py_host_loop.py ...``). Five modes
per round, in an order reversed every other round: untraced, ``--cpu-samples off``, 49 (the default), 99, 199.

Reported per mode (medians over the rounds):
- **steps/s** over the loop's wall time, and its ratio to the untraced run and to the ``off`` run of the
  same round. ``× off`` is the sampler's own cost, the number that matters: ``off`` has every other probe.
  Other tasks on CPU 1 move wall-time rates by far more than the sampler costs, so the same ratio is given
  from the median step time (``p50 step``: a step another task preempted falls out of it) and from steps a
  second of the loop's own CPU time (``CPU time``: other tasks' time is not in it; the sampler's is, as the
  interrupt it runs in is charged to the task it interrupts on kernels without IRQ_TIME_ACCOUNTING, and the
  bench prints whether this kernel has it);
- **samples / CPU s**: rows stored in ``cpu_samples`` for the loop's process inside the loop's time, over
  the loop's CPU time (should be about HZ);
- **µs / sample**: the sampling program's time as it measures itself (``sessions.drops`` ``cpu_sample_ns``
  over ``cpu_samples`` + ``drop_cpu_sample``), and **share**: that time for the loop's samples over the
  loop's CPU time. The interrupt and perf-event work around the program is not in it; ``× off`` holds it;
- **self-cost**: gpuscope's own figure for the process, ``sum(probe_ns) / sum(cpu_ns)`` of ``self_cost``
  (the calibrated cost of its probed calls plus the sampler's measured time).

Targets: at the default 49 Hz the sampler costs <= 0.2 % of a busy thread (share, and ``× off`` >= 0.998
within the noise of the rounds), well inside the 1 % overhead budget; samples / CPU s within 10 % of HZ;
no sample dropped. Numbers only: nothing here fails on a missed target.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import BENCH_DIR, BUILD_DIR, PYTHON, STANDIN_CUDART, median, use_source_bpf

LOOP = BENCH_DIR / "py_host_loop.py"
STEP_MS = 20.0
# None: no gpuscope; 0: traced with --cpu-samples off; else the rate.
MODES: tuple[int | None, ...] = (None, 0, 49, 99, 199)


@dataclass(frozen=True, slots=True)
class Run:
    """One run of the loop: what it did, and what the recording says about it."""

    steps_per_s: float
    steps_per_cpu_s: float
    step_ns_p50: int
    cpu_ns: int
    samples: int = 0
    sample_ns: float = 0.0
    dropped: int = 0
    self_cost_share: float | None = None


def mode_name(hz: int | None) -> str:
    return "untraced" if hz is None else "--cpu-samples off" if hz == 0 else f"--cpu-samples {hz}"


def _private_copy() -> Path:
    """A copy of the stand-in libcudart under its usual name (a fresh inode: no other trace fires in it)."""
    dest = BUILD_DIR / "libs" / "cpu-sample" / "libcudart.so.12"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists() or dest.stat().st_size != STANDIN_CUDART.stat().st_size:
        shutil.copyfile(STANDIN_CUDART, dest)
    return dest


def _units_for_step() -> int:
    """Items per batch for a ~STEP_MS step on CPU 1, fixed for the whole run so every mode does the same work."""
    out = subprocess.run(
        ["taskset", "-c", "1", PYTHON, str(LOOP), "calibrate"], capture_output=True, text=True, check=True
    ).stdout
    return max(1000, int(STEP_MS * 1e6 / float(out)))


def _loop_doc(stdout: str) -> dict[str, int]:
    doc: dict[str, int] = json.loads(stdout.strip().splitlines()[-1])
    return doc


def _rates(doc: dict[str, int]) -> tuple[float, float]:
    """Steps a second of the loop's wall time, and a second of its CPU time."""
    return doc["steps"] / ((doc["end_ns"] - doc["start_ns"]) / 1e9), doc["steps"] / (doc["cpu_ns"] / 1e9)


def _read_recording(db: Path, doc: dict[str, int]) -> tuple[int, float, int, float | None]:
    """(samples in the loop's time, ns per sample, samples dropped, self-cost share) from a finished recording."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (drops_json,) = conn.execute("SELECT drops FROM sessions ORDER BY id DESC LIMIT 1").fetchone()
        (samples,) = conn.execute(
            "SELECT count(*) FROM cpu_samples WHERE pid = ? AND ts_ns BETWEEN ? AND ?",
            (doc["pid"], doc["start_ns"], doc["end_ns"]),
        ).fetchone()
        probe_ns, cpu_ns = conn.execute(
            "SELECT sum(probe_ns), sum(cpu_ns) FROM self_cost WHERE pid = ?", (doc["pid"],)
        ).fetchone()
    finally:
        conn.close()
    drops = json.loads(drops_json)
    taken = drops.get("cpu_samples", 0) + drops.get("drop_cpu_sample", 0)
    per_sample = drops.get("cpu_sample_ns", 0) / taken if taken else 0.0
    share = probe_ns / cpu_ns if cpu_ns else None
    return int(samples), per_sample, int(drops.get("drop_cpu_sample", 0)), share


def run_once(hz: int | None, lib: Path, seconds: float, units: int, work: Path) -> Run:
    """Run the loop once in mode ``hz`` (see MODES)."""
    loop = ["taskset", "-c", "1", PYTHON, str(LOOP), str(lib), str(seconds), str(units)]
    if hz is None:
        doc = _loop_doc(subprocess.run(loop, capture_output=True, text=True, check=True).stdout)
        return Run(*_rates(doc), doc["step_ns_p50"], doc["cpu_ns"])
    db = work / f"hz{hz}.db"
    for stale in work.glob(f"hz{hz}.db*"):
        stale.unlink()
    samples = "off" if hz == 0 else str(hz)
    cmd = ["taskset", "-c", "0", PYTHON, "-m", "gpuscope", "trace", "--no-tui", "--status-every", "0"]
    cmd += ["--db", str(db), "--lib", str(lib), "--cpu-samples", samples, "--", *loop]
    doc = _loop_doc(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    n, per_sample, dropped, share = _read_recording(db, doc)
    return Run(*_rates(doc), doc["step_ns_p50"], doc["cpu_ns"], n, per_sample, dropped, share)


@dataclass(frozen=True, slots=True)
class ModeSummary:
    """One mode's medians over the rounds (ratios taken within each round first)."""

    hz: int | None
    steps_per_s: float
    vs_untraced: float
    vs_off: float
    vs_off_p50: float
    vs_off_cpu: float
    samples_per_cpu_s: float
    us_per_sample: float
    share: float
    self_cost_share: float | None
    dropped: int


def summarise(rounds: list[dict[int | None, Run]]) -> list[ModeSummary]:
    """Per mode: medians over rounds of each round's figures and ratios."""
    out = []
    for hz in MODES:
        runs = [(r[hz], r[None], r[0]) for r in rounds]
        sampled = [run for run, _, _ in runs if run.samples]
        costs = [c for run, _, _ in runs if (c := run.self_cost_share) is not None]
        out.append(
            ModeSummary(
                hz=hz,
                steps_per_s=median([run.steps_per_s for run, _, _ in runs]),
                vs_untraced=median([run.steps_per_s / base.steps_per_s for run, base, _ in runs]),
                vs_off=median([run.steps_per_s / off.steps_per_s for run, _, off in runs]),
                vs_off_p50=median([off.step_ns_p50 / run.step_ns_p50 for run, _, off in runs]),
                vs_off_cpu=median([run.steps_per_cpu_s / off.steps_per_cpu_s for run, _, off in runs]),
                samples_per_cpu_s=median([run.samples / (run.cpu_ns / 1e9) for run in sampled]),
                us_per_sample=median([run.sample_ns / 1e3 for run in sampled]),
                share=median([run.samples * run.sample_ns / run.cpu_ns for run in sampled]),
                self_cost_share=median(costs) if costs else None,
                dropped=sum(run.dropped for run, _, _ in runs),
            )
        )
    return out


def render(summaries: list[ModeSummary]) -> str:
    """A fixed-width table, one line per mode; '-' where a figure does not apply."""
    head = (
        "mode",
        "steps/s",
        "x untraced",
        "x off",
        "x off (p50 step)",
        "x off (CPU time)",
        "samples / CPU s",
        "us / sample",
        "share",
        "self-cost",
        "dropped",
    )
    rows = [head]
    for s in summaries:
        sampling = bool(s.hz)
        rows.append(
            (
                mode_name(s.hz),
                f"{s.steps_per_s:.2f}",
                "1" if s.hz is None else f"{s.vs_untraced:.4f}",
                f"{s.vs_off:.4f}" if s.hz is not None else "-",
                f"{s.vs_off_p50:.4f}" if s.hz is not None else "-",
                f"{s.vs_off_cpu:.4f}" if s.hz is not None else "-",
                f"{s.samples_per_cpu_s:.1f}" if sampling else "-",
                f"{s.us_per_sample:.1f}" if sampling else "-",
                f"{s.share:.3%}" if sampling else "-",
                f"{s.self_cost_share:.3%}" if s.self_cost_share is not None else "-",
                str(s.dropped) if sampling else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]

    def line(r: tuple[str, ...]) -> str:
        return "  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))])

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows[1:])])


def irq_time_accounting() -> str:
    """Whether this kernel keeps interrupt time out of tasks' CPU time (then ``× off (CPU time)`` misses it)."""
    text = ""
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    except OSError:
        boot = Path(f"/boot/config-{os.uname().release}")
        text = boot.read_text() if boot.is_file() else ""
    if "CONFIG_IRQ_TIME_ACCOUNTING=y" in text:
        return "IRQ_TIME_ACCOUNTING on: the CPU-time ratio misses the sampler"
    return "IRQ_TIME_ACCOUNTING off" if text else "IRQ_TIME_ACCOUNTING unknown"


def run(rounds: int, seconds: float) -> tuple[list[ModeSummary], str]:
    """Run every mode ``rounds`` times, interleaved; return the summaries and a line saying what ran."""
    bpf_note = use_source_bpf()
    lib = _private_copy()
    units = _units_for_step()
    load = Path("/proc/loadavg").read_text().split()[0]
    results: list[dict[int | None, Run]] = []
    with tempfile.TemporaryDirectory(prefix="gpuscope-cpu-sample-") as tmp:
        for r in range(rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            results.append({hz: run_once(hz, lib, seconds, units, Path(tmp)) for hz in order})
            done, off = results[-1], results[-1][0]
            print(
                f"  round {r + 1}/{rounds}: untraced {done[None].steps_per_s:.1f} steps/s, off "
                f"{off.steps_per_s:.1f}; x off (wall, CPU time): "
                + ", ".join(
                    f"{hz} Hz {done[hz].steps_per_s / off.steps_per_s:.3f} "
                    f"{done[hz].steps_per_cpu_s / off.steps_per_cpu_s:.3f}"
                    for hz in MODES
                    if hz
                ),
                file=sys.stderr,
                flush=True,
            )
    setup = (
        f"cpu_sample_bench: {rounds} rounds of {seconds:g} s per mode, {units} items a step "
        f"(~{STEP_MS:g} ms), kernel {os.uname().release} ({irq_time_accounting()}), {bpf_note}; 1-min load {load} before, "
        f"{Path('/proc/loadavg').read_text().split()[0]} after"
    )
    return summarise(results), setup


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=None, help="rounds of every mode (default 3; 1 with --quick)")
    p.add_argument("--seconds", type=float, default=None, help="loop time per run (default 10; 4 with --quick)")
    p.add_argument("--quick", action="store_true", help="one short round")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("cpu_sample_bench: needs root (BPF programs, perf events); run it with sudo", file=sys.stderr)
        return 1
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (4.0 if args.quick else 10.0)
    summaries, setup = run(rounds, seconds)
    print(setup)
    print(render(summaries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
