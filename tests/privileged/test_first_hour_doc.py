"""docs/first-hour.md, followed as written: every command in its shell blocks runs and does what the text says.

The commands run in bash, in order, as a new user would paste them, with
`gpuscope` and `sudo` on PATH and a virtual environment active: `gpuscope` is
this checkout's, and `sudo` runs its command directly with a PATH like
Debian's `secure_path` (the test is root already; the sudo path itself, with a
real user, is test_first_hour.py's), so a command that only works with the
user's PATH fails here as it would under sudo. `make` lines are what set up the
environment the test runs in. `train.py` is a stand-in job: the stand-in CUDA
runtime, loaded by name through LD_LIBRARY_PATH the way a framework loads the
real one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import StandinLibs

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "first-hour.md"


def shell_lines(markdown: str) -> list[str]:
    """The command lines of the guide's ```sh blocks, in order."""
    blocks = re.findall(r"^```sh\n(.*?)^```", markdown, flags=re.M | re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_first_hour_guide_runs_as_written(tmp_path: Path, standin: StandinLibs) -> None:
    # given a home, a project folder with a training script, and the guide's commands
    home, work, bin_dir = tmp_path / "home", tmp_path / "work", tmp_path / "bin"
    for d in (home, work, bin_dir):
        d.mkdir()
    (bin_dir / "gpuscope").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpuscope "$@"\n')
    # Debian's secure_path, with this folder standing for /usr/local/bin (where `make install` puts gpuscope)
    (bin_dir / "sudo").write_text(f'#!/bin/sh\nPATH="{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin" exec "$@"\n')
    for shim in bin_dir.iterdir():
        shim.chmod(0o755)
    (work / "train.py").write_text(
        textwrap.dedent(
            """
            import ctypes, time
            cuda = ctypes.CDLL("libcudart.so.12")
            ptr = ctypes.c_void_p()
            for step in range(60):
                cuda.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
                cuda.cudaStreamSynchronize(None)
                time.sleep(0.01)
            print("training done")
            """
        )
    )
    env = dict(
        os.environ,
        HOME=str(home),
        PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",  # the project's venv is active
        LD_LIBRARY_PATH=str(standin.dir),
        GPUSCOPE_STANDIN_LATENCY="cudaMalloc=50us,cudaStreamSynchronize=2ms",
    )
    env.pop("GPUSCOPE_DB", None)
    lines = shell_lines(GUIDE.read_text())
    assert lines[0] == "make demo" and len(lines) >= 10

    # when each command is run in order
    out: dict[str, str] = {}
    for line in lines:
        if line.startswith("make "):
            continue
        p = subprocess.run(
            ["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert p.returncode == 0, f"`{line}` failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        out[line] = p.stdout

    # then they did what the guide says
    db = home / ".gpuscope" / "gpuscope.db"
    assert db.is_file(), "the recording is not in the home's default place"
    assert out['sudo gpuscope trace -- "$(command -v python3)" train.py'] == "training done\n"  # the job's alone
    assert out['sudo gpuscope trace --standin -d 30s -- "$(command -v python3)" train.py'] == "training done\n"
    assert "query" in out["gpuscope docs"] and out["gpuscope docs query"].startswith("# Querying")
    explain = out["gpuscope explain"].splitlines()
    assert explain[0].startswith("Window: ") and "UTC" in explain[0]
    since = json.loads(out["gpuscope explain --since 30s --json"])
    assert since["window"]["events"] > 0
    query = next(v for k, v in out.items() if k.startswith("gpuscope query"))
    assert "cudaMalloc" in query and "cudaStreamSynchronize" in query
    assert "cudaMalloc" in out["gpuscope stacks --op cudaMalloc --min-duration 10us"]
    assert json.loads((work / "trace.json").read_text())["traceEvents"]
    stream = [json.loads(line) for line in (work / "live.jsonl").read_text().splitlines()]
    assert stream[-1]["type"] == "end"
    assert (
        "_ARGCOMPLETE"
        in subprocess.run(
            ["bash", "-c", "gpuscope completion bash"], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
