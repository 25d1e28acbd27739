"""`gpuscope trace --otlp` pushes the recording's exact counts to a real OTLP receiver; a collector that is down costs
the trace nothing but a counted drop."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import StandinLibs, TraceRun
from tests.otlp_receiver import by_op, metrics_by_name, otlp_receiver, resource_attributes
from tests.privileged.support import cudart_script

CALLS = 400


def _workload(tmp_path: Path, standin: StandinLibs, *, pause_s: float = 0.0) -> Path:
    """A script making CALLS cudaMalloc and cudaStreamSynchronize calls, pausing ``pause_s`` every 100 rounds."""
    return cudart_script(tmp_path / "work.py", standin.cudart, CALLS, pause=(100, pause_s))


def _trace(db: Path, standin: StandinLibs, script: Path, *otlp: str, env: dict[str, str] | None = None) -> TraceRun:
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "trace", "--no-tui", "--db", str(db), "--lib", str(standin.cudart),
         "--node", "gpu-test", *otlp, "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    return TraceRun(db, p.returncode, p.stdout, p.stderr)


def _recorded(run: TraceRun) -> dict[str, int]:
    return {str(op): int(str(n)) for op, n in run.query(
        "SELECT op, count(*) FROM events WHERE source = 'cuda' GROUP BY op")}  # fmt: skip


def test_otlp_push_carries_the_recordings_exact_counts_and_the_resource(tmp_path: Path, standin: StandinLibs) -> None:
    env = dict(os.environ, POD_NAME="gpuscope-abcde", NODE_NAME="k8s-node-1", GPUSCOPE_CLUSTER="train-a")
    with otlp_receiver() as receiver:
        run = _trace(
            tmp_path / "t.db", standin, _workload(tmp_path, standin),
            "--otlp", receiver.url, "--otlp-insecure", "--otlp-interval", "1s", env=env,
        )  # fmt: skip
        last = receiver.last()  # the push made at the end, after the session finished
        paths = set(receiver.paths)
    assert run.returncode == 0, run.stderr
    recorded = _recorded(run)
    assert recorded == {"cudaMalloc": CALLS, "cudaStreamSynchronize": CALLS}
    assert paths == {"/v1/metrics"}
    metrics = metrics_by_name(last)
    calls = by_op(metrics["gpuscope_calls"])
    assert {op: p.as_int for op, p in calls.items()} == recorded
    durations = by_op(metrics["gpuscope_call_duration_seconds"])
    assert {op: p.count for op, p in durations.items()} == recorded
    assert all(sum(p.bucket_counts) == p.count for p in durations.values())
    assert {"gpuscope_events_dropped", "gpuscope_agent_cpu_seconds", "gpuscope_otlp_exports_failed"} <= set(metrics)
    attrs = resource_attributes(last)
    assert attrs["service.name"] == "gpuscope"
    assert attrs["host.name"] == "gpu-test"
    assert attrs["k8s.pod.name"] == "gpuscope-abcde"
    assert attrs["k8s.node.name"] == "k8s-node-1"
    assert attrs["gpuscope.cluster"] == "train-a"
    assert f"otlp: {len(receiver.requests)} push(es) to {receiver.url}/v1/metrics, all delivered" in run.stderr


def test_a_collector_that_is_down_costs_the_trace_only_a_counted_drop(tmp_path: Path, standin: StandinLibs) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    # about 2 s of calls: pushes fail while the workload runs, not only the last one
    run = _trace(
        tmp_path / "t.db", standin, _workload(tmp_path, standin, pause_s=0.6),
        "--otlp", url, "--otlp-insecure", "--otlp-interval", "1s",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert _recorded(run) == {"cudaMalloc": CALLS, "cudaStreamSynchronize": CALLS}
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("otlp: ")]
    failed, _, rest = line.removeprefix("otlp: ").partition(" of ")
    pushes = rest.split(" ", 1)[0]
    assert int(failed) == int(pushes) >= 2, line
    assert f"to {url}/v1/metrics failed (last: connection refused);" in line
    assert line.endswith("data points dropped") and "Traceback" not in run.stderr
