"""Demo scenarios are registry entries: a story, a live part, a synthetic part, the expected finding.

Built-in scenarios (``gpuscope.demo.scenarios``) register themselves here the
same way an extension would: ``register(Scenario(...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpuscope.demo.live import LiveRun
from gpuscope.demo.synthetic import SyntheticRecording
from gpuscope.errors import UsageError


@dataclass(frozen=True, slots=True)
class Scenario:
    """One demo scenario.

    name: what ``gpuscope demo NAME`` takes.
    title: a one-line headline.
    story: what happens and what ``explain`` should conclude, in a few sentences.
    expected_kind: the kind of the top finding ``explain`` must report.
    synthetic: generate the recording into a ``SyntheticRecording`` (args: recording, scale).
    live: drive real processes through a ``LiveRun`` (args: run, scale).
    live_seconds: roughly how long ``live`` takes at scale 1 (for the progress bar).
    gpu_script: a PyTorch script in ``gpuscope/demo/torch/`` reproducing it on a real GPU, if any.
    aliases: other names accepted on the command line.
    """

    name: str
    title: str
    story: str
    expected_kind: str
    synthetic: Callable[[SyntheticRecording, float], None]
    live: Callable[[LiveRun, float], None]
    live_seconds: float
    gpu_script: str | None = None
    aliases: tuple[str, ...] = ()


class ScenarioRegistry:
    """Scenarios in registration order, looked up by name or alias."""

    def __init__(self) -> None:
        self._by_name: dict[str, Scenario] = {}
        self._aliases: dict[str, str] = {}

    def register(self, scenario: Scenario) -> Scenario:
        if scenario.name in self._by_name or scenario.name in self._aliases:
            raise ValueError(f"demo scenario {scenario.name!r} is already registered")
        self._by_name[scenario.name] = scenario
        for alias in scenario.aliases:
            self._aliases[alias] = scenario.name
        return scenario

    def get(self, name: str) -> Scenario:
        """The scenario called ``name`` (or an alias). Raises UsageError listing the names."""
        key = self._aliases.get(name, name)
        if key not in self._by_name:
            raise UsageError(f"no demo scenario {name!r}; choose from: {', '.join(self.names())}")
        return self._by_name[key]

    def names(self) -> list[str]:
        return list(self._by_name)

    def __iter__(self) -> Iterator[Scenario]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)


REGISTRY = ScenarioRegistry()
register = REGISTRY.register
