"""The documented workflow without root, end to end through real `gpuscope` processes and real files.

Each step reads what the previous one wrote: a recording is made (synthetic
demo), explained, queried through a pipe, exported, compared with a second
run, merged with it and with a real Ingero recording, and read back. Nothing
here is faked; the point is that the commands agree with each other.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.export.perfetto import AGGREGATE_COUNTERS
from tests.conftest import run_gpuscope
from tests.ingero_fixtures import ingero_fixture


def _ok(*args: str, env: dict[str, str] | None = None) -> str:
    res = run_gpuscope(*args, env=env)
    assert res.returncode == 0, f"gpuscope {' '.join(args)} -> {res.returncode}: {res.stderr}"
    assert "Traceback" not in res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two recordings of different scenarios, made the way a new user first makes one."""
    work = tmp_path_factory.mktemp("workflow")
    a, b = work / "incident.db", work / "periodic.db"
    _ok("demo", "--synthetic", "--db", str(a), "incident")
    _ok("demo", "--synthetic", "--db", str(b), "periodic-spike")
    return a, b


def test_explain_names_the_cause_the_scenario_planted_and_leaves_the_file_alone(runs: tuple[Path, Path]) -> None:
    a, _ = runs
    before = a.read_bytes()
    doc = json.loads(_ok("explain", "--db", str(a), "--json"))
    assert doc["findings"][0]["kind"] == "cpu-preemption"
    assert doc["stored"] is False
    assert a.read_bytes() == before


def test_query_through_a_pipe_gives_csv_that_agrees_with_the_recording(runs: tuple[Path, Path]) -> None:
    # given the recording's own count of events per op
    a, _ = runs
    conn = sqlite3.connect(f"file:{a}?mode=ro", uri=True)
    expected = dict(conn.execute("SELECT op, count(*) FROM events GROUP BY op").fetchall())
    conn.close()
    # when the same question goes through `gpuscope query --csv` into another process
    cmd = [
        sys.executable,
        "-m",
        "gpuscope",
        "query",
        "--db",
        str(a),
        "--csv",
        "SELECT op, count(*) AS n FROM events GROUP BY op",
    ]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        out, err = p.communicate(timeout=60)
    # then the rows parse back to the same counts, with nothing else on stdout
    assert p.returncode == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["op"]: int(r["n"]) for r in rows} == expected


def test_a_reader_closing_the_pipe_early_ends_the_command_quietly(runs: tuple[Path, Path]) -> None:
    a, _ = runs
    res = subprocess.run(
        f"{sys.executable} -m gpuscope query --db {a} --csv 'SELECT * FROM events' | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0 and res.stdout.count("\n") == 1
    assert res.stderr == ""


def test_export_writes_a_timeline_with_every_event_of_the_recording(runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = runs
    out = tmp_path / "trace.json"
    _ok("export", "--db", str(a), "-o", str(out))
    doc = json.loads(out.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    calls = [e for e in events if e.get("ph") == "X"]
    conn = sqlite3.connect(f"file:{a}?mode=ro", uri=True)
    # page allocations are counts per interval, exported as counter tracks, not slices
    aggregated = tuple(AGGREGATE_COUNTERS)
    marks = ",".join("?" * len(aggregated))
    stored = conn.execute(
        f"SELECT count(*) FROM events WHERE duration_ns > 0 AND op NOT IN ({marks})", aggregated
    ).fetchone()[0]
    counted = conn.execute(f"SELECT count(*) FROM events WHERE op IN ({marks})", aggregated).fetchone()[0]
    conn.close()
    assert len(calls) == stored
    assert counted == 0 or any(e.get("ph") == "C" and e["name"] == "page allocations/s" for e in events)


def test_diff_sees_the_planted_sync_spike_whichever_way_round_the_runs_are_given(runs: tuple[Path, Path]) -> None:
    # given the incident run (cudaStreamSynchronize about 8x slower) and a run without that spike
    incident, other = runs
    # when they are compared both ways
    forward = {o["op"]: o for o in json.loads(_ok("diff", str(other), str(incident), "--json"))["ops"]}
    backward = {o["op"]: o for o in json.loads(_ok("diff", str(incident), str(other), "--json"))["ops"]}
    # then the sync is a regression one way and an improvement the other, with ratios that invert
    sync_f, sync_b = forward["cudaStreamSynchronize"], backward["cudaStreamSynchronize"]
    assert (sync_f["change"], sync_b["change"]) == ("regression", "improvement")
    assert sync_f["p50_ratio"] > 5 and sync_b["p50_ratio"] == pytest.approx(1 / sync_f["p50_ratio"], rel=0.05)


def test_merge_of_our_runs_and_an_ingero_recording_keeps_every_event(runs: tuple[Path, Path], tmp_path: Path) -> None:
    # given two gpuscope recordings (renamed to two nodes) and a copy of a real Ingero recording
    a, b = runs
    ingero = tmp_path / "gpu-node-02.db"
    shutil.copyfile(ingero_fixture("sample-gpu-node-02.db"), ingero)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    counts = {}
    for path in (a, b, ingero):
        doc = json.loads(_ok("query", "--db", str(path), "--json", "SELECT count(*) AS n FROM events", env=env))
        counts[path] = doc[0]["n"]
    # when they are merged into one file
    merged = tmp_path / "cluster.db"
    renames = ["--force-node", f"{a}=node-a", "--force-node", f"{b}=node-b"]
    _ok("merge", str(a), str(b), str(ingero), "-o", str(merged), *renames, env=env)
    # then every event of every input is there, once, under its node
    every = ("--session", "all")  # the merged file's three runs, not only its last
    doc = json.loads(_ok("query", "--db", str(merged), *every, "--json", "SELECT count(*) AS n FROM events", env=env))
    assert doc[0]["n"] == sum(counts.values())
    nodes = json.loads(_ok("query", "--db", str(merged), *every, "--json", "SELECT DISTINCT node FROM events", env=env))
    assert {"node-a", "node-b"} <= {r["node"] for r in nodes}
