"""trace's summary counts the job's own host events; other processes' I/O is kept apart and named."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from tests.conftest import run_gpuscope


def _block_io_line(text: str) -> int:
    host = text.split("\nHost", 1)[1].split("\n\n", 1)[0]
    match = re.search(r"^\s+block_io\s+([\d,]+)", host, re.M)
    return int(match.group(1).replace(",", "")) if match else 0


def test_the_summary_counts_the_jobs_block_io_and_names_the_others_apart(tmp_path: Path, standin) -> None:
    # given another process writing to the disk while the job does too (the job: direct writes of its own)
    out = tmp_path / "other.bin"
    noisy = subprocess.Popen(
        ["sh", "-c", f"while :; do dd if=/dev/zero of={out} bs=64k count=16 oflag=direct 2>/dev/null; done"]
    )
    try:
        deadline = time.monotonic() + 30
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.05)  # writing before the trace starts, and all through it
        db = tmp_path / "t.db"
        job = f"dd if=/dev/zero of={tmp_path / 'job.bin'} bs=64k count=32 oflag=direct 2>/dev/null; sleep 0.5"
        p = run_gpuscope("trace", "--db", str(db), "--no-tui", "--", "sh", "-c", job, env=standin.env())
    finally:
        noisy.kill()
        noisy.wait()
    assert p.returncode == 0, p.stderr
    # then the Host table's block_io is what the job's own processes did, as the recording has it
    jobs = "(SELECT pid FROM events WHERE op IN ('process_exec', 'process_exit', 'sched_switch'))"
    own, theirs = subprocess.run(
        ["sqlite3", str(db), f"SELECT count(*) FROM events WHERE op = 'block_io' AND pid IN {jobs}; "
         f"SELECT count(*) FROM events WHERE op = 'block_io' AND pid NOT IN {jobs}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert _block_io_line(p.stderr) == int(own) > 0, p.stderr
    # and the other writer's requests are in the recording, counted in a section of their own
    others = p.stderr.split("Other processes", 1)[1]
    match = re.search(r"^\s+block_io\s+([\d,]+)", others, re.M)
    assert match and int(match.group(1).replace(",", "")) == int(theirs) > 0, p.stderr

    # and an export of it counts the job's threads, the other writers' labelled as not traced
    out = tmp_path / "t.json"
    e = run_gpuscope("export", "--db", str(db), "-o", str(out))
    assert e.returncode == 0, e.stderr
    names = [ev["args"]["name"] for ev in json.loads(out.read_text())["traceEvents"] if ev.get("name") == "thread_name"]
    ours = [n for n in names if not n.startswith("(not traced) ")]
    assert ours, names
    assert len(ours) < len(names), names  # the other processes whose I/O is in the recording, labelled
    assert f"events on {len(ours)} threads (and {len(names) - len(ours)} of other processes" in e.stderr, e.stderr
