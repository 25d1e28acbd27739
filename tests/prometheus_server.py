"""A real Prometheus server (Debian `prometheus`) for the tests, scraping every second, and its query API."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus_server(folder: Path, scrape_configs: str) -> Iterator[str]:
    """Start Prometheus with ``scrape_configs`` (YAML, indented two spaces) in ``folder``; yields its URL once ready."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is installed by `make setup` (apt package prometheus)")
    web = free_port()
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n" + scrape_configs.rstrip() + "\n"
    )
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{web}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("prometheus did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """The result of an instant query (the last scrape): a list of {"metric", "value"}."""
    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(promql)}", timeout=10) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])
