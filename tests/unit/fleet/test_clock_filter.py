"""The fleet client's clock offset: the sample with the shortest round trip, as NTP's clock filter keeps."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuscope.fleet.client import FleetClient, FleetTls, parse_nodes

OFFSET_NS = 7_000_000_000  # the node's clock runs 7 s ahead of ours
SLOW_S = 0.05  # most answers leave the node this long after it read its clock


class _Node(BaseHTTPRequestHandler):
    """``/api/v1/time`` that reads its clock, then (on every request but the third) waits before answering."""

    requests = 0

    def do_GET(self) -> None:
        stamp = time.time_ns() + OFFSET_NS
        type(self).requests += 1
        if type(self).requests != 3:
            time.sleep(SLOW_S)
        body = json.dumps({"timestamp_ns": stamp}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def node() -> Iterator[str]:
    _Node.requests = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Node)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_offset_is_the_one_of_the_fastest_exchange_within_half_its_round_trip(node: str) -> None:
    # given a node 7 s ahead whose answers but one leave 50 ms after it read its clock (a loaded node)
    client = FleetClient(parse_nodes(node), FleetTls(plain_http=True))
    # when its clock is measured over eight exchanges
    (result,) = client.clock(8)
    # then the fast exchange decides: its offset is within half its round trip of the truth, and that
    # half is the uncertainty (a median of offsets would be ~25 ms early: the slow answers' midpoints
    # fall 25 ms after the node read its clock)
    assert result.ok, result.error
    data = result.data
    assert data["samples"] == 8
    assert data["rtt_ns"] < SLOW_S * 1e9
    assert data["uncertainty_ns"] == data["rtt_ns"] // 2
    assert abs(data["clock_offset_ns"] - OFFSET_NS) <= data["uncertainty_ns"] + 1_000_000
    assert abs(data["clock_offset_ns"] - OFFSET_NS) < 10_000_000
