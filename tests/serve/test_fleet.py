"""Fan-out to several real dashboards on loopback: mutual TLS, clock offsets, dead, slow and foreign nodes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuscope.fleet.certs import init_fleet
from gpuscope.store.connect import connect_writer
from tests.serve.support import Server, contention_recording, dashboard

FAKE_OFFSET_S = 5
TOKEN = "fleet-test-token-0123456789"


def _libfaketime() -> str:
    for folder in ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime", "/usr/lib/faketime"):
        lib = Path(folder) / "libfaketime.so.1"
        if lib.exists():
            return str(lib)
    pytest.fail("libfaketime is installed by `make setup` (apt package faketime)")
    raise AssertionError


@dataclass
class Fleet:
    pki: Path
    alpha: Server
    beta: Server
    gamma: Server  # its clock FAKE_OFFSET_S ahead (libfaketime)
    foreign: Server  # a certificate from another CA (its own self-signed one)
    dead: str
    slow: str
    db: Path  # the recording every node serves

    def tls(self, *, client: bool = True) -> list[str]:
        args = ["--ca-cert", str(self.pki / "ca.pem")]
        if client:
            args += ["--client-cert", str(self.pki / "client.pem"), "--client-key", str(self.pki / "client.key")]
        return args

    def addr(self, s: Server) -> str:
        return f"127.0.0.1:{s.port}"


def _silent_listener(stop: threading.Event) -> tuple[socket.socket, str]:
    """A node that accepts connections and never says a word."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue
        for c in held:
            c.close()

    threading.Thread(target=accept, daemon=True).start()
    return sock, f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    pki = root / "pki"
    issued = init_fleet(pki, ["alpha", "beta", "gamma"], ["127.0.0.1", "localhost"])
    db = contention_recording(root / "run.db")
    env = {"GPUSCOPE_TOKEN": TOKEN}
    stop = threading.Event()
    with ExitStack() as stack:
        servers = {}
        for name in ("alpha", "beta", "gamma"):
            cert, key = issued.servers[name]
            extra = env | (
                {"LD_PRELOAD": _libfaketime(), "FAKETIME": f"+{FAKE_OFFSET_S}s", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
                if name == "gamma"
                else {}
            )
            servers[name] = stack.enter_context(
                dashboard(
                    db,
                    root / name,
                    "--tls-cert",
                    str(cert),
                    "--tls-key",
                    str(key),
                    "--ca-cert",
                    str(issued.ca),
                    env_extra=extra,
                )
            )
        foreign = stack.enter_context(dashboard(db, root / "foreign", env_extra=env))
        dead_sock = socket.socket()
        dead_sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{dead_sock.getsockname()[1]}"
        dead_sock.close()  # nothing listens there any more
        slow_sock, slow = _silent_listener(stop)
        stack.callback(slow_sock.close)
        stack.callback(stop.set)
        yield Fleet(pki, servers["alpha"], servers["beta"], servers["gamma"], foreign, dead, slow, db)


def gpuscope(*args: str, token: bool = True, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("GPUSCOPE_TOKEN", None)
    if token:
        env["GPUSCOPE_TOKEN"] = TOKEN
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_nodes_recovers_each_clock_offset_and_names_each_failure(fleet: Fleet) -> None:
    every = [fleet.addr(s) for s in (fleet.alpha, fleet.beta, fleet.gamma, fleet.foreign)] + [fleet.dead, fleet.slow]
    t0 = time.monotonic()
    p = gpuscope("nodes", "--nodes", ",".join(every), "--timeout", "1s", "--json", *fleet.tls())
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    by = {r["address"]: r for r in json.loads(p.stdout)}
    for s in (fleet.alpha, fleet.beta):
        r = by[fleet.addr(s)]
        assert r["ok"] and abs(r["clock_offset_ns"]) < 20_000_000, r  # the same host's clock
        assert r["samples"] >= 3 and r["uncertainty_ns"] == r["rtt_ns"] // 2
    gamma = by[fleet.addr(fleet.gamma)]
    assert gamma["ok"] and abs(gamma["clock_offset_ns"] - FAKE_OFFSET_S * 1_000_000_000) < 20_000_000, gamma
    assert "not trusted" in by[fleet.addr(fleet.foreign)]["error"]
    assert "refused" in by[fleet.dead]["error"]
    assert "no answer within 1 s" in by[fleet.slow]["error"]
    # the silent node cost about the timeout, not more: the nodes are asked in parallel
    assert took < 15, took


def test_query_fans_out_and_keeps_going_past_failed_nodes(fleet: Fleet) -> None:
    nodes = [fleet.addr(fleet.alpha), fleet.addr(fleet.gamma), fleet.dead, fleet.slow, fleet.addr(fleet.foreign)]
    sql = "SELECT op, count(*) AS n FROM events GROUP BY op ORDER BY op"
    t0 = time.monotonic()
    p = gpuscope("query", "--nodes", ",".join(nodes), "--timeout", "1s", "--json", *fleet.tls(), sql)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    # the silent node cost the 1 s timeout once (connection, handshake and answer share it), beside start-up
    assert took < 4.0, took
    rows = json.loads(p.stdout)
    assert {r["node"] for r in rows} == {fleet.addr(fleet.alpha), fleet.addr(fleet.gamma)}
    assert list(rows[0]) == ["node", "op", "n"]
    local = json.loads(gpuscope("query", "--db", str(fleet.alpha.info["recording"]), "--json", sql).stdout)
    assert [{k: r[k] for k in ("op", "n")} for r in rows if r["node"] == fleet.addr(fleet.alpha)] == local
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning: node ")]
    assert len(warnings) == 3 and all(any(n in w for w in warnings) for n in nodes[2:])


def test_every_node_down_is_an_error(fleet: Fleet) -> None:
    p = gpuscope("query", "--nodes", f"{fleet.dead},{fleet.slow}", "--timeout", "1s", *fleet.tls(), "SELECT 1")
    assert p.returncode == 1 and p.stderr.startswith("error: every node failed")


def test_without_a_client_certificate_the_nodes_refuse(fleet: Fleet) -> None:
    p = gpuscope("query", "--nodes", fleet.addr(fleet.alpha), *fleet.tls(client=False), "SELECT 1")
    assert p.returncode == 1 and "client certificate" in p.stderr


def test_the_fleet_certificate_is_the_credential_and_a_wrong_token_is_refused(fleet: Fleet) -> None:
    # the nodes serve with --ca-cert: the client's certificate from the fleet CA authenticates it
    p = gpuscope("query", "--nodes", fleet.addr(fleet.alpha), *fleet.tls(), "SELECT 1", token=False)
    assert p.returncode == 0, p.stderr
    # and a token that is sent must be the node's
    env = dict(os.environ, GPUSCOPE_TOKEN="not-the-fleet-token-0123")
    wrong = subprocess.run(
        [sys.executable, "-m", "gpuscope", "query", "--nodes", fleet.addr(fleet.alpha), *fleet.tls(), "SELECT 1"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stderr


def test_explain_merges_the_nodes_findings_by_severity(fleet: Fleet) -> None:
    nodes = ",".join(fleet.addr(s) for s in (fleet.alpha, fleet.beta))
    p = gpuscope("explain", "--nodes", nodes, "--json", *fleet.tls())
    assert p.returncode == 0, p.stderr
    found = json.loads(p.stdout)["findings"]
    assert {f["node"] for f in found} == {fleet.addr(fleet.alpha), fleet.addr(fleet.beta)}
    order = {"CRITICAL": 0, "HIGH": 1, "MEDIUM": 2, "LOW": 3}
    assert [order[f["severity"]] for f in found] == sorted(order[f["severity"]] for f in found)
    text = gpuscope("explain", "--nodes", nodes, *fleet.tls()).stdout
    assert f"{fleet.addr(fleet.alpha)}: cpu-preemption" in text


def test_explain_warns_once_about_a_dead_node_and_explains_the_others(fleet: Fleet) -> None:
    # given a live node and a dead one; when explain asks both (findings, then collectives and clocks)
    p = gpuscope("explain", "--nodes", f"{fleet.addr(fleet.alpha)},{fleet.dead}", *fleet.tls())
    # then the dead node is one warning line on stderr, and the live node's findings are printed
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning: node ")]
    assert len(warnings) == 1 and fleet.dead in warnings[0], p.stderr
    assert f"{fleet.addr(fleet.alpha)}: cpu-preemption" in p.stdout


def test_stacks_fan_out(fleet: Fleet) -> None:
    p = gpuscope("stacks", "--nodes", fleet.addr(fleet.alpha), "--json", *fleet.tls())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == []  # the builder's recording has no stacks: an empty answer, not an error


def _fleet_config(home: Path, fleet: Fleet, nodes: list[str]) -> None:
    config = home / ".config" / "gpuscope" / "config.toml"
    config.parent.mkdir(parents=True)
    listed = ", ".join(f'"{n}"' for n in nodes)
    config.write_text(
        f"[fleet]\nnodes = [{listed}]\n"
        f'ca_cert = "{fleet.pki / "ca.pem"}"\nclient_cert = "{fleet.pki / "client.pem"}"\n'
        f'client_key = "{fleet.pki / "client.key"}"\n'
    )


def test_the_config_files_fleet_is_used_without_nodes(fleet: Fleet, tmp_path: Path) -> None:
    _fleet_config(tmp_path, fleet, [fleet.addr(fleet.alpha), fleet.addr(fleet.beta)])
    p = gpuscope("nodes", "--json", home=tmp_path)
    assert p.returncode == 0, p.stderr
    assert [r["ok"] for r in json.loads(p.stdout)] == [True, True]


def test_the_mcp_query_fleet_tool_asks_the_configured_fleet(fleet: Fleet, tmp_path: Path) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from tests.serve.test_mcp import data

    _fleet_config(tmp_path, fleet, [fleet.addr(fleet.alpha), fleet.dead])
    env = {"HOME": str(tmp_path), "GPUSCOPE_TOKEN": TOKEN, "PATH": os.environ["PATH"]}
    args = ["-m", "gpuscope", "mcp", "--db", str(fleet.alpha.info["recording"])]

    async def go() -> dict[str, Any]:
        params = StdioServerParameters(command=sys.executable, args=args, env=env)
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                return data(await s.call_tool("query_fleet", {"sql": "SELECT count(*) AS n FROM events"}))

    got = anyio.run(go)
    assert got["columns"] == ["node", "n"] and got["rows"][0][0] == fleet.addr(fleet.alpha)
    assert any(fleet.dead in w for w in got["warnings"])


def test_plain_http_beyond_loopback_and_loose_keys_are_refused(fleet: Fleet, tmp_path: Path) -> None:
    p = gpuscope("query", "--nodes", "10.1.2.3:8080", "--insecure-http", "SELECT 1")
    assert p.returncode == 2 and "in clear" in p.stderr
    loose = tmp_path / "client.key"
    shutil.copy(fleet.pki / "client.key", loose)
    loose.chmod(0o644)
    p = gpuscope("query", "--nodes", fleet.addr(fleet.alpha), "--ca-cert", str(fleet.pki / "ca.pem"),
                 "--client-cert", str(fleet.pki / "client.pem"), "--client-key", str(loose), "SELECT 1")  # fmt: skip
    assert p.returncode == 2 and "chmod 600" in p.stderr


def test_certs_init_writes_private_keys_and_never_replaces_a_ca(tmp_path: Path) -> None:
    p = gpuscope("certs", "init", str(tmp_path / "pki"), "--nodes", "a,b", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    for key in [doc["client"]["key"], *(s["key"] for s in doc["servers"].values())]:
        assert Path(key).stat().st_mode & 0o077 == 0
    again = gpuscope("certs", "init", str(tmp_path / "pki"), "--nodes", "a")
    assert again.returncode == 2 and "never replaced" in again.stderr


def test_duckdb_over_the_nodes_parquet_exports_answers_as_query_nodes(tmp_path: Path) -> None:
    import duckdb

    # given three nodes' recordings, each with its own amount of work, served by three agents
    names = {"alpha": 100, "beta": 200, "gamma": 300}
    dataset = tmp_path / "dataset"
    with ExitStack() as stack:
        addresses = {}
        for name, steps in names.items():
            db = contention_recording(tmp_path / f"{name}.db", steps=steps, node=name)
            server = stack.enter_context(
                dashboard(db, tmp_path / f"home-{name}", "--no-tls", env_extra={"GPUSCOPE_TOKEN": TOKEN})
            )
            addresses[f"127.0.0.1:{server.port}"] = name
            # and each exported into one shared dataset folder
            p = gpuscope("export", "--db", str(db), "--format", "parquet", "-o", str(dataset), "--json")
            assert p.returncode == 0, p.stderr
        sql = "SELECT op, count(*) AS n, sum(duration_ns) AS t FROM events GROUP BY op"
        p = gpuscope("query", "--nodes", ",".join(addresses), "--insecure-http", "--json", "--limit", "10000", sql)
        assert p.returncode == 0, p.stderr
    fanned = {(addresses[r["node"]], r["op"]): (r["n"], r["t"]) for r in json.loads(p.stdout)}
    # when DuckDB reads the dataset
    relation = duckdb.sql(
        f"SELECT node, op, count(*), sum(duration_ns) FROM read_parquet('{dataset}/**/*.parquet', "
        "hive_partitioning = true) GROUP BY node, op"
    )
    assert relation is not None  # a SELECT always has a result
    rows = relation.fetchall()
    # then it gives the same answer, node by node
    assert {(node, op): (n, t) for node, op, n, t in rows} == fanned
    assert {node for node, _ in fanned} == set(names)


def test_export_nodes_puts_every_node_on_the_clients_clock(tmp_path: Path) -> None:
    # given the same work recorded on two nodes, the second with a clock 5 s ahead (its recording says so too)
    alpha_db = contention_recording(tmp_path / "alpha.db", node="alpha")
    gamma_db = contention_recording(tmp_path / "gamma.db", node="gamma")
    conn = connect_writer(gamma_db)
    conn.execute("UPDATE sessions SET started_wall_ns = started_wall_ns + ?", (FAKE_OFFSET_S * 1_000_000_000,))
    conn.close()
    ahead = {"LD_PRELOAD": _libfaketime(), "FAKETIME": f"+{FAKE_OFFSET_S}s", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    with (
        dashboard(alpha_db, tmp_path / "ha", "--no-tls", env_extra={"GPUSCOPE_TOKEN": TOKEN}) as alpha,
        dashboard(gamma_db, tmp_path / "hg", "--no-tls", env_extra={"GPUSCOPE_TOKEN": TOKEN, **ahead}) as gamma,
    ):
        out = tmp_path / "fleet.json"
        nodes = f"127.0.0.1:{alpha.port},127.0.0.1:{gamma.port}"
        p = gpuscope("export", "--nodes", nodes, "--insecure-http", "-o", str(out), "--json")
        assert p.returncode == 0, p.stderr
    trace = json.loads(out.read_text())
    offsets = trace["otherData"]["clock_offsets"]
    assert abs(offsets[f"127.0.0.1:{gamma.port}"]["clock_offset_ns"] - FAKE_OFFSET_S * 1_000_000_000) < 20_000_000
    # then the same call of the two nodes lands at the same moment of the trace (within the offset's error)
    firsts: dict[int, float] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e["name"] == "cudaStreamSynchronize":
            firsts.setdefault(e["pid"], e["ts"])
    assert len(firsts) == 2
    a, g = firsts.values()
    assert abs(a - g) < 20_000  # µs
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {f"node 127.0.0.1:{alpha.port}", f"node 127.0.0.1:{gamma.port}"}


def test_query_over_the_nodes_prints_the_table_a_local_query_prints(fleet: Fleet, tmp_path: Path) -> None:
    # given the same recording served by a node and read locally
    sql = "SELECT count(*) AS calls, sum(duration_ns) AS total_ns, min(wall_ns) AS wall_ns FROM events"
    local = gpuscope("query", "--db", str(fleet.db), "--table", sql)
    remote = gpuscope("query", "--nodes", fleet.addr(fleet.alpha), *fleet.tls(), "--table", sql)
    assert local.returncode == 0 and remote.returncode == 0, local.stderr + remote.stderr
    # then the node's rows read as the local ones do: grouped digits, durations and times made readable
    local_row = local.stdout.splitlines()[-1].split()
    remote_row = remote.stdout.splitlines()[-1].split()
    assert remote_row[1:] == local_row, (local.stdout, remote.stdout)
    assert local_row[-1].endswith("Z") and not local_row[1].isdigit(), local.stdout  # a time, and a duration
