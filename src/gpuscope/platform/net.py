"""Network addresses as users type them: ``HOST:PORT`` (``[v6]:PORT``), and whether a host is this machine."""

from __future__ import annotations

import ipaddress


def split_host_port(text: str) -> tuple[str, int] | None:
    """``host:8080`` / ``[::1]:8080`` -> (host without brackets, port); None unless a port 0..65535 follows a colon.

    The host may be empty (``:8080``): callers decide what that means.
    """
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return None
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); names other than localhost are not resolved."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
