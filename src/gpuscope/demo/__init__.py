"""`gpuscope demo`: seven scenarios that show what gpuscope finds, live, synthetic or on a real GPU.

Scenarios are registry entries (``gpuscope.demo.scenario.REGISTRY``); the
built-in seven register themselves in ``gpuscope.demo.scenarios``.
"""

from __future__ import annotations

from gpuscope.demo import scenarios as _builtin  # noqa: F401 - registers the built-in scenarios
from gpuscope.demo.runner import DemoMode, DemoResult, DemoRunner, default_db, ebpf_usable
from gpuscope.demo.scenario import REGISTRY, Scenario, ScenarioRegistry, register

__all__ = [
    "REGISTRY",
    "DemoMode",
    "DemoResult",
    "DemoRunner",
    "Scenario",
    "ScenarioRegistry",
    "default_db",
    "ebpf_usable",
    "register",
]
