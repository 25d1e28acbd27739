"""Run gpuscope's benchmarks and print one table: numbers beside their targets.

    python bench/run.py [--quick] [overhead|budget|drain|record_all|startup|kill|vs_bpftrace|late_loads ...]

Needs root (BPF, uprobes). Benchmarks report; they never fail on a missed
target. Exit status: 0, or 1 when a benchmark could not run at all.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Result, render_table

BENCHES = ("overhead", "budget", "drain", "record_all", "startup", "kill", "vs_bpftrace", "late_loads")


def _runner(name: str) -> Callable[[bool], list[Result]]:
    if name == "overhead":
        import overhead

        return overhead.run
    if name == "budget":
        import budget_bench

        return budget_bench.run
    if name == "drain":
        import drain

        return drain.run
    if name == "record_all":
        import record_all_bench

        return record_all_bench.run
    if name == "kill":
        import kill_bench

        return kill_bench.run
    if name == "vs_bpftrace":
        import vs_bpftrace

        return vs_bpftrace.run
    if name == "late_loads":
        import late_loads

        return late_loads.run
    import startup

    return startup.run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repetitions and shorter runs")
    p.add_argument(
        "--prog-stats",
        action="store_true",
        help="overhead: one more pass per config with kernel.bpf_stats_enabled=1 (host-wide, restored after) "
        "to report the time spent inside each BPF program",
    )
    p.add_argument("bench", nargs="*", choices=[*BENCHES, []], help="which benchmarks (default: all)")
    args = p.parse_args(argv)
    names = args.bench or list(BENCHES)
    if args.prog_stats:
        os.environ["GPUSCOPE_BENCH_PROG_STATS"] = "1"
    rows: list[Result] = []
    failed = False
    load_before = Path("/proc/loadavg").read_text().split()[0]
    t0 = time.monotonic()
    for name in names:
        print(f"running {name}...", file=sys.stderr, flush=True)
        try:
            rows += _runner(name)(args.quick)
        except Exception as exc:  # a benchmark that cannot run is reported, not hidden
            traceback.print_exc()
            rows.append(Result(name, "error", "", "", f"{type(exc).__name__}: {exc}"))
            failed = True
    print(
        f"gpuscope benchmarks, {time.strftime('%Y-%m-%d')}, {platform.node()}, kernel {platform.release()}, "
        f"{len(os.sched_getaffinity(0))} CPUs, {'quick' if args.quick else 'full'} run "
        f"({time.monotonic() - t0:.0f} s); 1-min load {load_before} before, "
        f"{Path('/proc/loadavg').read_text().split()[0]} after (other users' work skews every figure)"
    )
    print(render_table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
