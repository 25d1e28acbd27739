"""Value objects shared by every layer: ops, sources, events, findings."""
