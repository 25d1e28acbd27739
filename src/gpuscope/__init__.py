"""gpuscope: eBPF-based GPU causal observability."""

from typing import Any

from gpuscope._version import __version__

__all__ = ["__version__", "open"]


def __getattr__(name: str) -> Any:
    # The notebook API, gpuscope.open("run.db"), imported on first use: the
    # CLI should not pay for numpy and the analysis code it may not need.
    if name == "open":
        from gpuscope.api import open as open_

        return open_
    raise AttributeError(name)
