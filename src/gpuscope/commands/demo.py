"""gpuscope demo: run the six scenarios (or one) and explain each, live, synthetic or on a real GPU."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from gpuscope.demo import REGISTRY, DemoMode, DemoResult, DemoRunner, default_db, ebpf_usable
from gpuscope.demo.gpu import detect_gpu
from gpuscope.demo.live import STANDIN_DIR
from gpuscope.demo.render import banner, header, next_steps, summary, verdict
from gpuscope.errors import PermissionDeniedError, UsageError
from gpuscope.render.explain import render_report

NAME = "demo"
HELP = "run the demo scenarios (incident, cold-start, …) and explain each: live on a stand-in CUDA library, synthetic, or --gpu"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "scenario", nargs="?", metavar="NAME", help=f"one scenario: {', '.join(REGISTRY.names())} (default: all)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--live",
        dest="mode",
        action="store_const",
        const=DemoMode.LIVE,
        help="real processes on the bundled stand-in CUDA library, traced with eBPF (default as root)",
    )
    mode.add_argument(
        "--synthetic",
        "--no-gpu",
        dest="mode",
        action="store_const",
        const=DemoMode.SYNTHETIC,
        help="generated events through the same store and analysis; no root needed",
    )
    mode.add_argument(
        "--gpu",
        dest="mode",
        action="store_const",
        const=DemoMode.GPU,
        help="small PyTorch workloads on the real GPU (needs an NVIDIA GPU and PyTorch)",
    )
    # Not the shared --db: six scenarios must not land in the user's recording unless it is named.
    p.add_argument(
        "--db",
        metavar="PATH",
        help="keep the data in this database (default: ~/.cache/gpuscope/demo/demo.db, replaced by each run; path printed)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        metavar="F",
        help="multiply each scenario's length (e.g. 0.4 for a quick run; default 1)",
    )
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")


def _progress(console: Console) -> Progress:
    columns = (
        SpinnerColumn(),
        TextColumn("[bold]{task.fields[name]}"),
        BarColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
    )
    return Progress(*columns, console=console, transient=True)


def run(args: argparse.Namespace) -> int:
    if args.list:
        for s in REGISTRY:
            print(f"{s.name:<18} {s.title}  (explain: {s.expected_kind})")
        return 0
    scenarios = [REGISTRY.get(args.scenario)] if args.scenario else list(REGISTRY)
    if args.scale <= 0:
        raise UsageError(f"--scale {args.scale}: must be positive")
    mode: DemoMode | None = args.mode
    err = Console(stderr=True)
    if mode is None or mode is DemoMode.LIVE:
        ok, why = ebpf_usable()
        if not ok and mode is DemoMode.LIVE:
            raise PermissionDeniedError(
                f"--live needs eBPF: {why}", remedy="run as root (sudo gpuscope demo), or `gpuscope demo --synthetic`"
            )
        if not ok:
            print(
                f"eBPF is not usable here ({why}): running the synthetic demo (same store, same analysis)",
                file=sys.stderr,
            )
        mode = DemoMode.LIVE if ok else DemoMode.SYNTHETIC
    db = Path(args.db).expanduser() if args.db else default_db()
    print(header(mode, detect_gpu(), str(db), str(STANDIN_DIR / "libcudart.so.12")))
    results: list[DemoResult] = []
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    with DemoRunner(db, scale=args.scale) as runner:
        for i, scenario in enumerate(scenarios, 1):
            print()
            print(banner(scenario, i, len(scenarios), width))
            sys.stdout.flush()
            with _progress(err) as bar:
                task = bar.add_task("starting", total=1.0, name=scenario.name)

                def step(frac: float, what: str, task: TaskID = task, bar: Progress = bar) -> None:
                    bar.update(task, completed=frac, description=what)

                result = runner.run(scenario, mode, step)
            results.append(result)
            print()
            print(render_report(result.report))
            print()
            print(verdict(result))
            sys.stdout.flush()
    if len(results) > 1:
        print()
        print(summary(results))
    print()
    print(next_steps(str(db), [r.session_id for r in results]))
    return 0 if all(r.as_expected for r in results) else 1
