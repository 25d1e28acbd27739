"""Settings shared by the property-based tests: reproducible and quick, in CI as on a laptop.

``derandomize`` draws the same examples on every run (a failure reproduces
as it is), ``database=None`` leaves no ``.hypothesis`` folder behind, and no
per-example deadline: a loaded 2-CPU runner must not fail a test for being slow.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def quick(max_examples: int) -> settings:
    """Settings for a property checked on ``max_examples`` generated inputs."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
