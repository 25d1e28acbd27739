"""One thin module per subcommand: parse, call the core, render.

Each module is a ``Command``: ``gpuscope.cli`` keeps the ordered registry and
mypy checks every registered module against the protocol there.
"""

from __future__ import annotations

import argparse
from typing import Protocol, runtime_checkable


@runtime_checkable
class Command(Protocol):
    """What a subcommand module provides: its name and help line, its options, and the run that returns an exit status."""

    NAME: str
    HELP: str

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        """Add the command's options and arguments to its subparser."""

    def run(self, args: argparse.Namespace) -> int:
        """Run with the parsed arguments; return the exit status (errors are raised, and mapped by the CLI)."""
