"""Fan-out latency: `gpuscope query --nodes` over 32 real dashboards on loopback, with mutual TLS.

Starts N agents (`gpuscope dashboard`, each with its node certificate from
`gpuscope certs init` and `--ca-cert`, so every request is a full TLS 1.3
handshake with a client certificate), then times the CLI end to end:

- all N healthy, a query that costs the nodes nothing (`SELECT 1`: the fan-out itself) and a 50k-event scan;
- the same N plus one dead node (nothing listens) and one silent node (accepts, never answers), with
  `--timeout`: the silent one must cost about the timeout, no more.

Usage: .venv/bin/python bench/fleet_bench.py [--agents 32] [--runs 20] [--timeout 0.5s]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain_bench import generate

TOKEN = "fleet-bench-token-0123456789"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def silent_node(stop: threading.Event) -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{sock.getsockname()[1]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=32)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--timeout", default="2s", help="per-node limit in the set with the dead and silent nodes")
    args = ap.parse_args()
    gpuscope = [sys.executable, "-m", "gpuscope"]
    env = dict(os.environ, GPUSCOPE_TOKEN=TOKEN)
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        db = scratch / "node.db"
        generate(db, 50_000)
        names = [f"node{i:02d}" for i in range(args.agents)]
        subprocess.run([*gpuscope, "certs", "init", str(scratch / "pki"), "--nodes", ",".join(names),
                        "--also-name", "127.0.0.1"], check=True, capture_output=True)  # fmt: skip
        agents, addresses = [], []
        t0 = time.monotonic()
        for name in names:
            pki = scratch / "pki" / name
            proc = subprocess.Popen(
                [*gpuscope, "dashboard", "--db", str(db), "--addr", "127.0.0.1:0", "--json",
                 "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                 "--ca-cert", str(scratch / "pki" / "ca.pem")],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(env, HOME=scratch_name),
            )  # fmt: skip
            agents.append(proc)
        try:
            for proc in agents:
                assert proc.stdout is not None
                info = json.loads(proc.stdout.readline())
                addresses.append(info["api"].split("//", 1)[1].split("/", 1)[0])
            print(f"{args.agents} agents up in {time.monotonic() - t0:.1f} s", file=sys.stderr)
            tls = ["--ca-cert", str(scratch / "pki" / "ca.pem"), "--client-cert", str(scratch / "pki" / "client.pem"),
                   "--client-key", str(scratch / "pki" / "client.key")]  # fmt: skip
            sql = "SELECT op, count(*) AS n FROM events GROUP BY op"
            dead_sock = socket.socket()
            dead_sock.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{dead_sock.getsockname()[1]}"
            dead_sock.close()
            slow = silent_node(stop)
            results = {}
            for label, nodes, timeout, text in (
                (f"{args.agents} healthy, SELECT 1", addresses, "5s", "SELECT 1 AS one"),
                (f"{args.agents} healthy", addresses, "5s", sql),
                (f"{args.agents} + dead + silent", [*addresses, dead, slow], args.timeout, sql),
            ):
                times = []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    p = subprocess.run(
                        [*gpuscope, "query", "--nodes", ",".join(nodes), "--timeout", timeout, "--json", *tls,
                         text], capture_output=True, text=True, env=env,
                    )  # fmt: skip
                    times.append(time.perf_counter() - t)
                    if p.returncode != 0:
                        raise SystemExit(f"query --nodes failed: {p.stderr[-800:]}")
                    answered = {r["node"] for r in json.loads(p.stdout)}
                    if len(answered) != len(addresses):
                        print(f"{label}: {len(answered)} of {len(addresses)} agents answered", file=sys.stderr)
                results[label] = times
            version = subprocess.run([*gpuscope, "version"], capture_output=True, text=True, env=env)
            startup = []
            for _ in range(5):
                t = time.perf_counter()
                subprocess.run([*gpuscope, "version"], capture_output=True, env=env)
                startup.append(time.perf_counter() - t)
            assert version.returncode == 0
        finally:
            stop.set()
            for proc in agents:
                proc.send_signal(signal.SIGINT)
            for proc in agents:
                proc.wait(timeout=30)
    base = percentile(startup, 0.5)
    print(
        f"`gpuscope query --nodes` end to end (mutual TLS, a new handshake per node; silent node's --timeout {args.timeout}):"
    )
    print(f"{'set':<28}{'p50':>9}{'p95':>9}{'p50 - CLI start-up':>22}")
    for label, times in results.items():
        p50, p95 = percentile(times, 0.5), percentile(times, 0.95)
        print(f"{label:<28}{p50:>8.2f}s{p95:>8.2f}s{p50 - base:>21.2f}s")
    print(f"(`gpuscope version`, the CLI's own start-up: p50 {base:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
