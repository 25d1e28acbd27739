"""Text for the demo: the header, a scenario's banner and its verdict. Pure functions, no printing."""

from __future__ import annotations

import platform
import textwrap

from gpuscope.demo.gpu import GpuInfo
from gpuscope.demo.runner import DemoMode, DemoResult
from gpuscope.demo.scenario import Scenario
from gpuscope.model.units import fmt_ns
from gpuscope.store.events_read import COUNT_BY_OP

_MODE_TEXT = {
    DemoMode.LIVE: "live: real processes on the stand-in CUDA library, traced with eBPF",
    DemoMode.SYNTHETIC: "synthetic: generated events, same store and analysis (no root, no eBPF)",
    DemoMode.GPU: "gpu: small PyTorch workloads on the real GPU, traced with eBPF",
}


def header(mode: DemoMode, gpu: GpuInfo | None, db: str, standin: str | None) -> str:
    """Describe the run before the first scenario: mode, device, kernel and database."""
    if gpu is not None and mode is DemoMode.GPU:
        device = f"GPU: {gpu.describe()}"
    elif gpu is not None:
        device = f"GPU: {gpu.describe()} (not used in this mode: add --gpu for the PyTorch versions)"
    else:
        device = "no GPU: stand-in CUDA library" + (f" ({standin})" if standin and mode is DemoMode.LIVE else "")
    lines = [
        f"gpuscope demo · {_MODE_TEXT[mode]}",
        f"  {device}",
        f"  kernel {platform.release()} · database {db}",
    ]
    return "\n".join(lines)


def banner(scenario: Scenario, index: int, total: int, width: int = 100) -> str:
    """Title a scenario with a rule across the terminal, and wrap its story under it."""
    title = f"━━ {index}/{total} {scenario.name}: {scenario.title} "
    story = textwrap.fill(scenario.story, width=min(width, 100), initial_indent="   ", subsequent_indent="   ")
    return f"{title}{'━' * max(0, min(width, 100) - len(title))}\n{story}"


def verdict(result: DemoResult) -> str:
    """Say in one line whether a scenario's top finding was the expected one."""
    mark = "✓" if result.as_expected else "✗"
    top = result.top_kind or "no finding"
    return (
        f"{mark} top finding: {top} (expected {result.scenario.expected_kind}) · {result.events:,} events · "
        f"session {result.session_id} · {fmt_ns(result.elapsed_s * 1e9)}"
    )


def summary(results: list[DemoResult]) -> str:
    """Tabulate every scenario's outcome."""
    lines = ["Summary", f"  {'scenario':<20} {'top finding':<18} {'expected':<18} {'events':>9} {'time':>9}"]
    for r in results:
        mark = "✓" if r.as_expected else "✗"
        lines.append(
            f"{mark} {r.scenario.name:<20} {(r.top_kind or '-'):<18} {r.scenario.expected_kind:<18} "
            f"{r.events:>9,} {fmt_ns(r.elapsed_s * 1e9):>9}"
        )
    return "\n".join(lines)


def next_steps(db: str, session_ids: list[int], program: str = "gpuscope") -> str:
    """Point at what to run next on the recording the demo kept.

    ``program`` is how this gpuscope is run here (``gpuscope`` when that is
    on PATH, else its full path), so each line works when pasted.
    """
    if len(session_ids) == 1:
        again = f"  {program} explain --db {db} --session {session_ids[0]}   # the scenario again"
    else:
        first, last = session_ids[0], session_ids[-1]
        again = (
            f"  {program} explain --db {db} --session all   # all the scenarios at once "
            f"(--session {first} … {last} for one)"
        )
    lines = [
        f"data kept in {db} ({len(session_ids)} session(s)). Next:",
        again,
        f'  {program} query --db {db} --session all "{COUNT_BY_OP}"',
        f"  sudo {program} trace -- python train.py    # your own workload",
    ]
    if program != "gpuscope":
        lines.append("  (`make install` puts `gpuscope` on PATH)")
    return "\n".join(lines)
