"""Entry point: an ordered registry of thin subcommands.

Each command module exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. Errors from the core map to exit codes here; a
traceback is shown only with ``-vv``.
"""

from __future__ import annotations

import argparse
import importlib
import keyword
import sqlite3
import sys
import traceback
from types import ModuleType

from gpuscope._version import __version__
from gpuscope.errors import EXIT_FAILURE, EXIT_USAGE, GpuscopeError

COMMANDS = ["trace", "explain", "stacks", "check", "query", "export", "diff", "merge", "import", "demo", "version"]


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"gpuscope.commands.{name}{'_' if keyword.iskeyword(name) else ''}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` just that command's module imported.

    Importing every command pulls in numpy, rich and the analysis code; a
    command line names one command, so start-up imports only that one.
    """
    parser = argparse.ArgumentParser(
        prog="gpuscope",
        description="eBPF GPU causal observability: trace CUDA and the host, explain why it is slow.",
    )
    parser.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more diagnostics (-vv: tracebacks)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        mod = _load(name)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    only = next((w for w in words if not w.startswith("-")), None)
    parser = build_parser(only if only in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args._run(args))
    except GpuscopeError as exc:
        if args.verbose >= 2:
            traceback.print_exc()
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except sqlite3.Error as exc:
        if args.verbose >= 2:
            traceback.print_exc()
        print(f"error: database: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: still one line, the traceback on request
        if args.verbose >= 2:
            traceback.print_exc()
        print(f"error: internal error: {type(exc).__name__}: {exc} (rerun with -vv for the traceback)", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:
        return EXIT_FAILURE


def run() -> None:
    sys.exit(main())
