"""Many nodes at once: fan-out over the nodes' dashboard APIs, clock offsets, certificates for mutual TLS."""
