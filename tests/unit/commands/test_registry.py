"""The command registry: every registered module is a Command named as it is registered."""

from __future__ import annotations

import pytest

from gpuscope.cli import COMMANDS, load_command
from gpuscope.commands import Command


@pytest.mark.parametrize("name", COMMANDS)
def test_every_registered_command_is_a_command_under_its_own_name(name: str) -> None:
    command = load_command(name)
    assert isinstance(command, Command)
    assert (command.NAME, bool(command.HELP)) == (name, True)
