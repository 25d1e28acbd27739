"""gpuscope: eBPF-based GPU causal observability."""

__version__ = "0.1.0"
from gpuscope.api import open as open  # the notebook API: gpuscope.open("run.db")
