"""HOST:PORT as users type it, and loopback hosts: the one parser the servers, the fleet and --prometheus share."""

from __future__ import annotations

import pytest

from gpuscope.platform.net import is_loopback, split_host_port


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("gpu-1:8080", ("gpu-1", 8080)),
        ("[::1]:8443", ("::1", 8443)),
        (" 127.0.0.1:0 ", ("127.0.0.1", 0)),
        (":9000", ("", 9000)),
        ("gpu-1", None),
        ("gpu-1:http", None),
        ("gpu-1:70000", None),
        ("gpu-1:", None),
    ],
)
def test_host_port(text: str, address: tuple[str, int] | None) -> None:
    assert split_host_port(text) == address


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("localhost", True), ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("10.0.0.1", False),
     ("gpu-1", False), ("0.0.0.0", False)],
)  # fmt: skip
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
