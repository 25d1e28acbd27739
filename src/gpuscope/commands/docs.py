"""gpuscope docs: read the guides (query, schema, explain, …) that ship with gpuscope."""

from __future__ import annotations

import argparse
import json
import sys

from gpuscope.errors import UsageError
from gpuscope.render.docs import find_topic, topics

NAME = "docs"
HELP = "read a guide shipped with gpuscope (e.g. `gpuscope docs query`); without TOPIC, list them"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", nargs="?", metavar="TOPIC", help="a guide's name: query, schema, explain, trace, …")
    p.add_argument("--path", action="store_true", help="print the guide's file path instead of its text")
    p.add_argument("--json", action="store_true", help="list the guides (or the one guide) as JSON")


def run(args: argparse.Namespace) -> int:
    if args.topic is None:
        found = topics()
        if not found:
            raise UsageError("no guides found in this installation", remedy="reinstall gpuscope from its wheel")
        if args.json:
            print(json.dumps([{"topic": t.name, "title": t.title, "path": str(t.path)} for t in found], indent=2))
            return 0
        width = max(len(t.name) for t in found)
        for t in found:
            print(f"{t.name:<{width}}  {t.title}")
        print("\n`gpuscope docs TOPIC` prints one", file=sys.stderr)
        return 0
    topic = find_topic(args.topic)
    if topic is None:
        names = ", ".join(t.name for t in topics())
        raise UsageError(f"docs: no guide named {args.topic!r}", remedy=f"one of: {names}")
    if args.path:
        print(topic.path)
    elif args.json:
        print(json.dumps({"topic": topic.name, "title": topic.title, "path": str(topic.path)}))
    elif sys.stdout.isatty():
        _page(topic.path.read_text(encoding="utf-8"))
    else:
        sys.stdout.write(topic.path.read_text(encoding="utf-8"))
    return 0


def _page(markdown: str) -> None:
    """Render the Markdown for a terminal, through the pager ($PAGER, else less) like `git help`."""
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console()
    with console.pager(styles=True):
        console.print(Markdown(markdown))
