"""Overload: when the ring fills, every record is either stored or counted as dropped."""

from __future__ import annotations

from tests.privileged.support import session_drops


def calls_made(stdout: str) -> int:
    (line,) = [line for line in stdout.splitlines() if line.startswith("calls ")]
    return int(line.split()[1])


def test_records_lost_to_a_full_ring_are_counted_exactly(build_workload, trace_command):
    # given 2 threads calling cudaLaunchKernel back to back, 400k times each
    exe = build_workload("cuda_hammer.c")
    # when traced through a 64 KiB ring (about 680 records), without host events
    run = trace_command([str(exe), "400000", "2"], extra=["--ring-size", "64k", "--no-host"], timeout=180)
    # then records were lost
    assert run.returncode == 0, run.stderr
    made = calls_made(run.stdout)
    assert made == 800_000
    drops = session_drops(run)
    assert drops["drop_cuda"] > 0
    # and each call is either counted in the aggregates (with a row of its own or not) or counted as a
    # runtime drop, exactly
    ((counted,),) = run.query("SELECT coalesce(sum(count), 0) FROM aggregates WHERE op = 'cudaLaunchKernel'")
    assert counted + drops["drop_cuda"] == made
    stored = run.op_counts().get("cudaLaunchKernel", 0)
    assert 0 < stored <= counted
    # and the other sources lost nothing, and the session row agrees with the aggregates
    assert drops["drop_driver"] == drops["drop_host"] == 0
    ((recorded, dropped),) = run.query("SELECT events_recorded, events_dropped FROM sessions")
    assert recorded == drops["submitted"] == run.query("SELECT sum(count) FROM aggregates")[0][0]
    assert dropped == drops["dropped"] == drops["drop_cuda"]
    # and the summary reports the loss
    assert f"{dropped:,} dropped" in run.stderr
