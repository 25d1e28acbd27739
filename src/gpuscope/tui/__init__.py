"""The live view of `gpuscope trace`: snapshots built on a thread, rendered by views."""
