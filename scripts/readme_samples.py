"""Regenerate the README's text samples from a real run: the live view and an explain report.

Runs the `incident` demo scenario live (root and eBPF needed), keeps the live
view's snapshot from the CPU storm (the one with the most preemptions), and
rewrites the README between the markers:

    <!-- sample:live -->     ... <!-- /sample:live -->
    <!-- sample:explain -->  ... <!-- /sample:explain -->

Usage: sudo .venv/bin/python scripts/readme_samples.py [--check] [--scale F]
--check exits 1 when the markers are missing instead of writing.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WIDTH = 100
MARKERS = ("live", "explain")


def scrub(text: str, work: Path) -> str:
    """Take this machine's paths out of a sample: the package as pip installs it, the demo's folder by a fixed name."""
    package = str(ROOT / "src" / "gpuscope")
    return text.replace(package, "…/site-packages/gpuscope").replace(str(work), "/tmp/gpuscope-demo")


def replace_section(text: str, name: str, body: str) -> str:
    """Put ``body`` in a ```text block between the ``name`` markers (which must exist)."""
    pattern = re.compile(rf"(<!-- sample:{name} -->\n).*?(<!-- /sample:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no <!-- sample:{name} --> ... <!-- /sample:{name} --> markers")
    return pattern.sub(lambda m: f"{m.group(1)}```text\n{body.rstrip()}\n```\n{m.group(2)}", text)


def section(text: str, name: str) -> str | None:
    """The sample between the ``name`` markers, without the code fence."""
    m = re.search(rf"<!-- sample:{name} -->\n```text\n(.*?)\n```\n<!-- /sample:{name} -->", text, re.S)
    return m.group(1) if m else None


def render_live(snap: object) -> str:
    from rich.console import Console

    from gpuscope.tui.snapshot import LiveSnapshot
    from gpuscope.tui.view import render_screen

    assert isinstance(snap, LiveSnapshot)
    console = Console(width=WIDTH, record=True, file=open("/dev/null", "w"), color_system=None)  # noqa: SIM115
    console.print(render_screen(snap, None, WIDTH))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that the markers exist")
    ap.add_argument("--scale", type=float, default=1.0, help="scenario length factor (default 1)")
    args = ap.parse_args()
    text = README.read_text()
    if args.check:
        missing = [m for m in MARKERS if section(text, m) is None]
        print("missing: " + ", ".join(missing) if missing else "ok")
        return 1 if missing else 0
    from gpuscope.demo import REGISTRY, DemoMode, DemoRunner
    from gpuscope.render.explain import render_report
    from gpuscope.tui.snapshot import LiveSnapshot

    best: list[LiveSnapshot] = []

    def keep(snap: LiveSnapshot) -> None:
        score = sum(1 for f in snap.findings if "preemption" in f)
        if not best or score >= sum(1 for f in best[0].findings if "preemption" in f):
            best[:] = [snap]

    work = Path(tempfile.mkdtemp(prefix="gpuscope-readme-"))
    with DemoRunner(work / "demo.db", scale=args.scale) as runner:
        result = runner.run(REGISTRY.get("incident"), DemoMode.LIVE, snapshots=keep)
    if not best or not result.as_expected:
        print(f"the incident run did not end as expected (top: {result.top_kind}); README unchanged", file=sys.stderr)
        return 1
    live = scrub(render_live(best[0]), work)
    report = scrub(render_report(result.report), work)
    text = replace_section(text, "live", "$ sudo gpuscope trace -- python train.py\n" + live)
    text = replace_section(text, "explain", "$ gpuscope explain\n" + report)
    README.write_text(text)
    print(f"README.md samples regenerated from {result.db} (session {result.session_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
