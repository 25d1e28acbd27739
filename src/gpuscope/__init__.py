"""gpuscope: eBPF-based GPU causal observability."""

__version__ = "0.1.0"
