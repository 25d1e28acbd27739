"""API latency of `gpuscope dashboard`: p50/p99 of /api/v1/ops and /api/v1/findings on a 1M-event recording.

Starts the real server (TLS, token) on a generated recording (the explain
bench's generator), then times sequential requests from a keep-alive TLS
client. Reported beside the same reads done in-process (explain_db), so the
server's own cost is a ratio measured in one run on this noisy machine.

Usage: .venv/bin/python bench/api_bench.py [--events 1000000] [--requests 20] [--dir DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from http.client import HTTPSConnection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain_bench import generated


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--dir", default=str(Path(__file__).resolve().parent / ".build" / "api"))
    args = ap.parse_args()
    db = generated(args.dir, "api", args.events)

    from gpuscope.analysis.engine import ExplainOptions, explain_db

    in_process = []
    for _ in range(max(3, args.requests // 4)):
        t0 = time.perf_counter()
        explain_db(db, ExplainOptions())
        in_process.append(time.perf_counter() - t0)

    with tempfile.TemporaryDirectory() as home:
        server = subprocess.Popen(
            [sys.executable, "-m", "gpuscope", "dashboard", "--db", str(db), "--addr", "127.0.0.1:0", "--json"],
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, HOME=home),
        )  # fmt: skip
        try:
            assert server.stdout is not None
            info = json.loads(server.stdout.readline())
            token = info["url"].split("token=", 1)[1]
            port = int(info["api"].rsplit(":", 1)[1].split("/", 1)[0])
            ctx = ssl.create_default_context(cafile=str(Path(home) / ".gpuscope" / "tls" / "dashboard-cert.pem"))
            conn = HTTPSConnection("127.0.0.1", port, context=ctx, timeout=120)
            results = {}
            fresh = itertools.count(1000)  # a new `since` per cold request; warm ones reuse since=1000h
            # cold: a window not asked for before (each `since` is a new explain); warm: the same window again,
            # the recording unchanged (served from the report cache, as a page refresh is).
            for label, path in (
                ("time", "/api/v1/time"),
                ("ops cold", "/api/v1/ops?since={i}h"),
                ("findings cold", "/api/v1/findings?since={i}h"),
                ("ops warm", "/api/v1/ops?since=1000h"),
                ("findings warm", "/api/v1/findings?since=1000h"),
            ):
                times = []
                for _ in range(args.requests):
                    t0 = time.perf_counter()
                    conn.request("GET", path.format(i=next(fresh)), headers={"Authorization": f"Bearer {token}"})
                    res = conn.getresponse()
                    res.read()
                    times.append(time.perf_counter() - t0)
                    assert res.status == 200, (path, res.status)
                results[label] = times
            conn.close()
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)

    base = statistics.median(in_process)
    print(f"recording: {args.events:,} events; explain in-process median {base * 1e3:.0f} ms")
    print(f"{'endpoint':<28}{'p50':>10}{'p99':>10}{'p50 / in-process explain':>28}")
    for path, times in results.items():
        p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
        print(f"{path:<28}{p50 * 1e3:>8.1f}ms{p99 * 1e3:>8.1f}ms{p50 / base:>27.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
