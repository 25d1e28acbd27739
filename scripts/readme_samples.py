"""Regenerate the README's text samples from a real run: the live view and an explain report.

Runs the `incident` demo scenario live (root and eBPF needed), keeps the live
view's snapshot from the CPU storm (the one with the most preemptions), and
rewrites the README between the markers:

    <!-- sample:live -->     ... <!-- /sample:live -->
    <!-- sample:explain -->  ... <!-- /sample:explain -->

The samples name no path of the machine that made them: the run records into
``gpuscope.db`` in a scratch working directory (removed afterwards), as
``gpuscope trace --db gpuscope.db`` would, and the package's folder is shown
as ``…/site-packages/gpuscope``, where pip puts it. A sample that still shows
a machine path (``machine_paths``) is not written.

Usage: sudo .venv/bin/python scripts/readme_samples.py [--check] [--scale F]
--check writes nothing: it exits 1 when a marker is missing or a sample shows a machine path.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WIDTH = 100
MARKERS = ("live", "explain")
DB_NAME = "gpuscope.db"  # relative, so the live view's header shows just this name
COMMAND = f"$ sudo gpuscope trace --db {DB_NAME} -- python train.py"
PACKAGE_SHOWN = "…/site-packages/gpuscope"

# Paths that belong to one machine or one run, wherever they appear in a document.
_MACHINE_PATHS = re.compile(
    r"""
    (?<![\w.~-])(?:
        /home/[\w.-]+                              # a user's home
      | /Users/[\w.-]+
      | /root(?=/|\b)                               # root's home
      | /(?:var/)?tmp/(?:tmp|pytest-of-)[\w.-]*     # tempfile's tmpXXXXXXXX, pytest's folders
      | /(?:var/)?tmp/[\w.]+(?:-[\w.]+)*-[a-z0-9_]{8}(?![\w.-])  # mkdtemp(prefix="name-"): name-XXXXXXXX
      | /[\w./-]*/src/gpuscope(?=/|\b)              # the package inside a source checkout
    )
    """,
    re.X,
)


def machine_paths(text: str, checkout: Path = ROOT) -> list[str]:
    """The paths in ``text`` that belong to one machine: the checkout, a home, a random temporary folder."""
    found = [m.group(0) for m in _MACHINE_PATHS.finditer(text)]
    if checkout != Path("/"):
        found += re.findall(rf"{re.escape(str(checkout))}(?![\w.-])", text)
    return found


def scrub(text: str) -> str:
    """Show the package where pip installs it instead of where this checkout holds it."""
    return text.replace(str(ROOT / "src" / "gpuscope"), PACKAGE_SHOWN)


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

    from gpuscope.tui.live_snapshot import LiveSnapshot
    from gpuscope.tui.screen import render_screen

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
        problems = [f"missing: {m}" for m in MARKERS if section(text, m) is None]
        problems += [
            f"machine path in the {m} sample: {p}" for m in MARKERS for p in machine_paths(section(text, m) or "")
        ]
        print("\n".join(problems) or "ok")
        return 1 if problems else 0
    from gpuscope.demo import REGISTRY, DemoMode, DemoRunner
    from gpuscope.render.explain import render_report
    from gpuscope.tui.live_snapshot import LiveSnapshot

    best: list[LiveSnapshot] = []

    def keep(snap: LiveSnapshot) -> None:
        score = sum(1 for f in snap.findings if "preemption" in f)
        if not best or score >= sum(1 for f in best[0].findings if "preemption" in f):
            best[:] = [snap]

    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="gpuscope-readme-") as work:
        os.chdir(work)
        try:
            with DemoRunner(Path(DB_NAME), scale=args.scale) as runner:
                result = runner.run(REGISTRY.get("incident"), DemoMode.LIVE, snapshots=keep)
        finally:
            os.chdir(here)
    if not best or not result.as_expected:
        print(f"the incident run did not end as expected (top: {result.top_kind}); README unchanged", file=sys.stderr)
        return 1
    live = COMMAND + "\n" + scrub(render_live(best[0]))
    report = "$ gpuscope explain\n" + scrub(render_report(result.report))
    leaked = machine_paths(live + "\n" + report)
    if leaked:
        print(
            f"a sample shows a path of this machine ({', '.join(sorted(set(leaked)))}); README unchanged",
            file=sys.stderr,
        )
        return 1
    README.write_text(replace_section(replace_section(text, "live", live), "explain", report))
    print(f"README.md samples regenerated (session {result.session_id}; the recording was removed with its folder)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
