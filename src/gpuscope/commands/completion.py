"""gpuscope completion: print the shell hook for tab completion (bash, zsh, fish)."""

from __future__ import annotations

import argparse
import sys

NAME = "completion"
HELP = 'print the tab-completion hook for bash, zsh or fish (e.g. eval "$(gpuscope completion bash)")'

SHELLS = ("bash", "zsh", "fish")

_WHERE = {
    "bash": 'eval "$(gpuscope completion bash)" in ~/.bashrc, '
    "or save it as /usr/share/bash-completion/completions/gpuscope",
    "zsh": 'eval "$(gpuscope completion zsh)" in ~/.zshrc (after compinit)',
    "fish": "gpuscope completion fish > ~/.config/fish/completions/gpuscope.fish",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.epilog = "install: " + "; ".join(f"{shell}: {where}" for shell, where in _WHERE.items())


def run(args: argparse.Namespace) -> int:
    # argcomplete's hook calls gpuscope back with the command line in the
    # environment; gpuscope.cli answers it from the same parser that parses
    # the command, so completion never drifts from the options.
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["gpuscope"], shell=args.shell))
    return 0
