"""gpuscope demo: run the seven scenarios (or one) and explain each, live, synthetic or on a real GPU."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from gpuscope.config import expand_home
from gpuscope.demo import REGISTRY, DemoMode, DemoResult, DemoRunner, default_db, ebpf_usable
from gpuscope.demo.gpu import detect_gpu
from gpuscope.demo.render import banner, header, next_steps, summary, verdict
from gpuscope.errors import PermissionDeniedError, UsageError
from gpuscope.platform.invocation import invocation
from gpuscope.platform.standin import STANDIN_DIR
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
    # Not the shared --db: seven scenarios must not land in the user's recording unless it is named.
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
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object on stdout: each scenario's verdict, top finding and session (progress stays on stderr)",
    )


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
        if args.json:
            print(json.dumps([{"name": s.name, "title": s.title, "expected": s.expected_kind} for s in REGISTRY]))
            return 0
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
    db = expand_home(args.db, "--db") if args.db else default_db()
    # With --json the human report goes to stderr: stdout carries the one JSON object.
    out = sys.stderr if args.json else sys.stdout
    print(header(mode, detect_gpu(), str(db), str(STANDIN_DIR / "libcudart.so.12")), file=out)
    results: list[DemoResult] = []
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    with DemoRunner(db, scale=args.scale) as runner:
        for i, scenario in enumerate(scenarios, 1):
            print(file=out)
            print(banner(scenario, i, len(scenarios), width), file=out)
            out.flush()
            with _progress(err) as bar:
                task = bar.add_task("starting", total=1.0, name=scenario.name)

                def step(frac: float, what: str, task: TaskID = task, bar: Progress = bar) -> None:
                    bar.update(task, completed=frac, description=what)

                result = runner.run(scenario, mode, step)
            results.append(result)
            print(f"\n{render_report(result.report)}\n\n{verdict(result)}", file=out)
            out.flush()
    if len(results) > 1:
        print(f"\n{summary(results)}", file=out)
    print(f"\n{next_steps(str(db), [r.session_id for r in results], invocation())}", file=out)
    if args.json:
        print(json.dumps(_as_dict(db, mode, results), indent=2))
    return 0 if all(r.as_expected for r in results) else 1


def _as_dict(db: Path, mode: DemoMode, results: list[DemoResult]) -> dict[str, object]:
    return {
        "db": str(db),
        "mode": mode.value,
        "all_as_expected": all(r.as_expected for r in results),
        "scenarios": [
            {
                "name": r.scenario.name,
                "expected": r.scenario.expected_kind,
                "top_finding": r.top_kind,
                "as_expected": r.as_expected,
                "session_id": r.session_id,
                "events": r.events,
                "elapsed_s": round(r.elapsed_s, 3),
                "findings": [f.kind for f in r.report.findings],
            }
            for r in results
        ],
    }
