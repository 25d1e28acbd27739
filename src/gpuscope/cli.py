"""Entry point: an ordered registry of thin subcommands.

Each command module is a ``gpuscope.commands.Command``: ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Errors from the core map
to exit codes here; a traceback is shown only with ``-vv``.

In a pipe whose reader stops early (``gpuscope query ... | head -1``),
gpuscope stops quietly and exits 141 (128 + SIGPIPE), the status a shell
reports for ``git log | head`` or ``cat big | head``: nothing on stderr.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import keyword
import os
import signal
import sqlite3
import sys
import traceback
from typing import TYPE_CHECKING

from gpuscope._version import __version__
from gpuscope.commands import Command
from gpuscope.config import unread_config_files
from gpuscope.errors import EXIT_FAILURE, EXIT_USAGE, GpuscopeError
from gpuscope.model.printable import printable
from gpuscope.store.integrity import READER_DAMAGE_REMEDY

COMMANDS = [
    "trace",
    "explain",
    "stacks",
    "check",
    "query",
    "export",
    "diff",
    "merge",
    "import",
    "demo",
    "dashboard",
    "mcp",
    "nodes",
    "certs",
    "docs",
    "completion",
    "version",
]

# The status of a process killed by SIGPIPE, as shells report it.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

if TYPE_CHECKING:
    from gpuscope.commands import (
        certs,
        check,
        completion,
        dashboard,
        demo,
        diff,
        docs,
        explain,
        export,
        import_,
        mcp,
        merge,
        nodes,
        query,
        stacks,
        trace,
        version,
    )

    # Not run: makes mypy check every command module against the Command protocol.
    _REGISTERED: tuple[Command, ...] = (
        trace,
        explain,
        stacks,
        check,
        query,
        export,
        diff,
        merge,
        import_,
        demo,
        dashboard,
        mcp,
        nodes,
        certs,
        docs,
        completion,
        version,
    )


def load_command(name: str) -> Command:
    """Import the module of command ``name`` (``import`` lives in ``import_``); raises TypeError if it is not a Command."""
    module = importlib.import_module(f"gpuscope.commands.{name}{'_' if keyword.iskeyword(name) else ''}")
    if not isinstance(module, Command):
        raise TypeError(f"{module.__name__} lacks NAME, HELP, add_arguments or run")
    return module


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Build the full parser, or with ``only`` one that imports just that command's module.

    Importing every command pulls in numpy, rich and the analysis code; a
    command line names one command, so start-up imports only that one.
    """
    # No abbreviations: `trace --record` must not silently become `--record-all`.
    parser = argparse.ArgumentParser(
        prog="gpuscope",
        description="eBPF GPU causal observability: trace CUDA and the host, explain why it is slow.",
        epilog="`gpuscope COMMAND -h` for a command's options; `gpuscope docs` for the guides.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more diagnostics (-vv: tracebacks)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name, allow_abbrev=False)
            continue
        command = load_command(name)
        p = sub.add_parser(name, help=command.HELP, description=command.HELP, allow_abbrev=False)
        # Also after the command (`gpuscope explain -vv`), where the error messages ask for it.
        p.add_argument(
            "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more diagnostics (-vv: tracebacks)"
        )
        command.add_arguments(p)
        p.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command line; return the exit status (0 ok, 1 failure, 2 usage, 3 environment, 141 closed pipe)."""
    try:
        try:
            return _dispatch(argv)
        finally:
            # Output still buffered would otherwise meet a closed pipe at interpreter exit.
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _dispatch(argv: list[str] | None) -> int:
    if "_ARGCOMPLETE" in os.environ:
        _complete()
    words = sys.argv[1:] if argv is None else argv
    only = next((w for w in words if not w.startswith("-")), None)
    if only is None and "--version" in words and not {"-h", "--help"} & set(words):
        only = ""  # the version needs no command's module (loading them all took half a second)
    # A config file in a default location that cannot be read is passed over: say so, before any --help.
    for skipped in unread_config_files():
        print(f"warning: {skipped}", file=sys.stderr)
    parser = build_parser(only if only in COMMANDS or only == "" else None)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args._run(args))
    except GpuscopeError as exc:
        if args.verbose >= 2:
            traceback.print_exc()
        # A message may quote a name or text from the recording: its control characters are shown, not obeyed.
        print(printable(exc.render(), keep_lines=True), file=sys.stderr)
        return exc.exit_code
    except sqlite3.Error as exc:
        if args.verbose >= 2:
            traceback.print_exc()
        print(printable(f"error: database: {exc}"), file=sys.stderr)
        if "malformed" in str(exc):
            # Damage deep in a large table passes the bounded check on open and shows only here.
            print(f"  fix: the recording is damaged: {READER_DAMAGE_REMEDY}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # the reader went away: not an error of ours (see main)
    except Exception as exc:  # a bug: still one line, the traceback on request
        if args.verbose >= 2:
            traceback.print_exc()
        message = f"error: internal error: {type(exc).__name__}: {exc} (rerun with -vv for the traceback)"
        print(printable(message), file=sys.stderr)
        return EXIT_FAILURE


def _complete() -> None:
    """Answer the shell's tab completion (``gpuscope completion SHELL`` installs the hook); exits."""
    import argcomplete

    argcomplete.autocomplete(build_parser(), always_complete_options="long")
    sys.exit(0)  # reached only when argcomplete did not answer (a malformed request)


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush has nowhere to fail (Python's documented way)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # no real file descriptor (an in-process caller's buffer): nothing is flushed at exit


def run() -> None:
    status = main()
    # Interpreter exit ends with a full garbage collection over every object
    # still alive: 30-45 ms after a trace, for nothing (files and the
    # recording are closed). Frozen objects are left out of it; atexit
    # handlers and buffered output are untouched.
    gc.freeze()
    sys.exit(status)
