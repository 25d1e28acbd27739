"""Stack sites: full stacks once per call site (and one call in N), exact call counts per stack."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.privileged.support import json_line

SHORT_PY = Path(__file__).resolve().parent.parent / "workloads" / "stack_short_py.py"


def _counts_by_caller(run) -> dict[str, int]:
    """cudaMalloc calls per stack, keyed by the frame that called alloc_from."""
    rows = run.query("SELECT frames, count(*) FROM event_call_stacks WHERE op = 'cudaMalloc' GROUP BY stack_hash")
    out: dict[str, int] = {}
    for frames_json, n in rows:
        names = [str(f.get("function")) for f in json.loads(str(frames_json))]
        assert names[:2] == ["cudaMalloc", "alloc_from"], names
        out[names[2]] = out.get(names[2], 0) + int(str(n))
    return out


def test_calls_from_two_sites_sharing_a_direct_caller_are_counted_exactly_per_site(build_workload, trace_command):
    # given 300 calls through one wrapper, from two sites (one call in three from site_a)
    exe = build_workload("stack_sites.c")
    # when traced with the default policy (full stacks once per site, then one call in 64)
    run = trace_command([str(exe), "300"])
    # then every call is linked to a stack, and each site's stack has exactly its calls
    assert run.returncode == 0, run.stderr
    want = json_line(run.stdout)
    assert run.query("SELECT count(*) FROM event_call_stacks WHERE op = 'cudaMalloc'") == [(300,)]
    assert _counts_by_caller(run) == want


def test_full_stacks_on_every_call_give_the_same_counts_as_site_references(build_workload, trace_command):
    # given the same workload
    exe = build_workload("stack_sites.c")
    # when one run takes a full stack on every call and another the default
    full = trace_command([str(exe), "90"], extra=["--stack-every", "cudaMalloc=1"])
    sites = trace_command([str(exe), "90"])
    # then both attribute the calls alike
    assert full.returncode == 0 and sites.returncode == 0, (full.stderr, sites.stderr)
    assert _counts_by_caller(full) == _counts_by_caller(sites) == {"site_a": 30, "site_b": 60}


def test_on_cpu_samples_landing_inside_a_call_probe_leave_its_stack_whole(build_workload, trace_command):
    # given 20,000 calls that each take a full stack, sampled on-CPU at the top rate: a
    # sample's perf event can fire while a call's uprobe program runs on the same CPU
    exe = build_workload("stack_sites.c")
    run = trace_command([str(exe), "20000"], extra=["--stack-every", "cudaMalloc=1", "--cpu-samples", "999"])
    # then every call is still linked to its own stack, and the samples were taken
    assert run.returncode == 0, run.stderr
    assert run.query("SELECT count(*) FROM events WHERE op = 'cudaMalloc'") == [(20000,)]
    assert run.query("SELECT count(*) FROM event_call_stacks WHERE op = 'cudaMalloc'") == [(20000,)]
    assert _counts_by_caller(run) == json_line(run.stdout)
    assert int(str(run.query("SELECT count(*) FROM cpu_samples")[0][0])) > 0


def test_every_python_call_is_linked_to_a_stack_naming_its_executing_line(trace_command, standin):
    # given 200 calls from one Python line (one site: the first call takes the
    # full stack, the rest refer to it, with one resampled full stack in 64)
    run = trace_command([sys.executable, str(SHORT_PY), str(standin.cudart), "200"])
    # then all 200 calls share stacks that name the inner function's line
    assert run.returncode == 0, run.stderr
    expected = json_line(run.stdout)
    rows = run.query("SELECT frames, count(*) FROM event_call_stacks WHERE op = 'cudaMalloc' GROUP BY stack_hash")
    assert sum(int(str(n)) for _, n in rows) == 200, rows
    for frames_json, _ in rows:
        py = [(f.get("function"), f.get("line")) for f in json.loads(str(frames_json)) if f["kind"] == "python"]
        assert py[:3] == [tuple(level) for level in expected["levels"]], py


MANY_CODES = Path(__file__).resolve().parent.parent / "workloads" / "py_many_codes.py"


@pytest.mark.parametrize("lifetime", ["kept", "freed"])
def test_python_frames_stay_named_while_on_cpu_samples_land_inside_code_descriptions(trace_command, standin, lifetime):
    # given 5,000 Python functions, each calling once, each call a code object never described before, with
    # full stacks on every call and on-CPU samples at the top rate (they land inside the calls' probes); kept
    # alive, or freed after their call (the next function's code object often takes the freed one's address)
    n = 5000
    run = trace_command(
        [sys.executable, str(MANY_CODES), str(standin.cudart), str(n), *(["free"] if lifetime == "freed" else [])],
        extra=["--stack-every", "cudaMalloc=1", "--cpu-samples", "999"],
    )
    assert run.returncode == 0, run.stderr
    # then every call with a stack has its innermost Python frame naming the function that made it (its bytes say
    # which); a call without one is a counted loss (a burst of new code can fill the stack ring), said in the summary
    rows = run.query("SELECT bytes, frames FROM event_call_stacks WHERE op = 'cudaMalloc'")
    drops = json.loads(str(run.query("SELECT drops FROM sessions")[0][0]))
    assert n / 2 <= len(rows) and n - len(rows) <= drops["drop_stack"] + drops["stacks_unattributed"], (
        len(rows),
        drops,
    )
    if len(rows) < n:
        assert "call stacks:" in run.stderr, run.stderr
    wrong, unnamed = [], 0
    for size, frames_json in rows:
        py = [f.get("function") for f in json.loads(str(frames_json)) if f["kind"] == "python"]
        if py and py[0] is None:
            unnamed += 1  # its code's description was lost to the full ring: unnamed, never another's name
        elif not py or py[0] != f"f_{int(str(size)) - 4096}":
            wrong.append((size, py[:2]))
    assert wrong == [], f"{len(wrong)} of {len(rows)} calls misnamed, e.g. {wrong[:5]}"
    assert unnamed <= drops["drop_stack"], (unnamed, drops)
    assert int(str(run.query("SELECT count(*) FROM cpu_samples")[0][0])) > 0
