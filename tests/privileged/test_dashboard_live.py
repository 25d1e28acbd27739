"""The dashboard serves a recording that `trace` is still writing, and its numbers grow while it records."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import StandinLibs
from tests.serve.support import dashboard


def test_the_api_follows_a_recording_in_progress(tmp_path: Path, standin: StandinLibs, build_workload) -> None:
    exe = build_workload("cuda_calls.c")
    db = tmp_path / "live.db"
    tracer = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "trace", "--no-tui", "--db", str(db), "--lib", str(standin.cudart),
         "--", str(exe), "4000"],
        env=standin.env(cudaStreamSynchronize="2ms:sleep"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not db.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # a first commit
        with dashboard(db, tmp_path / "home") as server:
            counts = []
            for _ in range(3):
                status, ops = server.get_json("/api/v1/ops")
                assert status == 200, ops
                counts.append(sum(o["count"] for o in ops["ops"] if o["op"] == "cudaLaunchKernel"))
                time.sleep(1.5)
            assert tracer.poll() is None, "the workload ended before the test could watch it grow"
            assert counts[0] > 0 and counts[-1] > counts[0], counts
            status, overview = server.get_json("/api/v1/overview")
            assert status == 200 and overview["events"] > 0
            # and the host's CPU, memory and load of each second were recorded with it
            status, system = server.get_json("/api/v1/snapshots")
            assert status == 200 and system["source"] == "recorded", system
            samples = system["snapshots"]
            assert len(samples) >= 2 and all(s["cpus"] >= 1 and 0 <= s["mem_pct"] <= 100 for s in samples)
            assert [s["wall_ns"] for s in samples] == sorted(s["wall_ns"] for s in samples)
            assert any(s["cpu_pct"] is not None and 0 <= s["cpu_pct"] <= 100 for s in samples[1:])
    finally:
        tracer.wait(timeout=120)
    assert tracer.returncode == 0, tracer.stderr.read().decode() if tracer.stderr else ""
