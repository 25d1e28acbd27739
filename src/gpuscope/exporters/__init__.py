"""What a running trace exports while it records: Prometheus metrics (``/metrics``) and OTLP pushes.

The write side of serving: fed by the trace's live statistics, started by
``gpuscope trace``; the dashboard and MCP (``gpuscope.serve``) only read recordings.
"""
