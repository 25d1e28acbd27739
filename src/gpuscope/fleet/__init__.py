"""Many nodes at once: fan-out over the nodes' dashboard APIs, clock offsets, certificates for mutual TLS."""

# Clock samples per node: the one with the shortest round trip is kept (gpuscope.fleet.client).
CLOCK_SAMPLES = 8
