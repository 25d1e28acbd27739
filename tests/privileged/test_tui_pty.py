"""The live view end to end: `gpuscope trace` in a real terminal (tmux) against a traced stand-in workload.

Also the non-terminal outputs of the same command: plain lines on stderr
when piped, JSON objects on stdout with ``--json``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import StandinLibs, TraceRun, run_gpuscope

EXPLAIN_NEXT = "next, for this run: gpuscope explain --db "


class Tmux:
    """One private tmux server (its own socket) running one command in a 120x45 pane."""

    def __init__(self) -> None:
        self.socket = f"gpuscope-test-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args: str) -> str:
        p = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10, check=True)
        return p.stdout

    def start(self, command: str) -> None:
        # The pane stays after the command ends (bounded), so its output can be read.
        shell = f"{command}; echo EXIT=$?; exec sleep 120"
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "120", "-y", "45", shell)

    def screen(self) -> str:
        """The visible screen plus 300 lines of history, wrapped lines joined."""
        return self.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-300")

    def wait_for(self, predicate: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"screen did not show what was expected within {timeout}s:\n{screen}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10, check=False)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed (apt-get install -y tmux)")
    t = Tmux()
    try:
        yield t
    finally:
        t.kill()


def trace_shell_command(
    standin: StandinLibs, db: Path, workload: list[str], latency: str = "", *, output: str = "/dev/null"
) -> str:
    """The trace, as typed in the pane; ``output``: where the workload's stdout goes ("" for the terminal)."""
    env = [f"LD_LIBRARY_PATH={standin.dir}"] + ([f"GPUSCOPE_STANDIN_LATENCY={latency}"] if latency else [])
    cmd = [
        "env",
        *env,
        sys.executable,
        "-m",
        "gpuscope",
        "trace",
        "--db",
        str(db),
        "--lib",
        str(standin.cudart),
        "--lib",
        str(standin.cuda),
        "--",
        *workload,
    ]
    # The live view and the summary are drawn on stderr, the pane's terminal; stdout is the workload's. The
    # full screen is drawn only when the workload's output goes elsewhere (it would hide it otherwise).
    return shlex.join(cmd) + (f" > {shlex.quote(output)}" if output else "")


def shows_live_runtime_table(screen: str) -> bool:
    lines = screen.splitlines()
    return any(line.startswith("CUDA Runtime ·") for line in lines) and any(
        line.startswith("cudaLaunchKernel") and any(ch.isdigit() for ch in line) for line in lines
    )


def test_ctrl_c_in_the_live_view_stops_and_prints_the_summary(
    tmux: Tmux,
    standin: StandinLibs,
    build_workload,
    tmp_path: Path,
) -> None:
    # given a workload that would run for a long time, traced in a terminal
    exe = build_workload("cuda_calls.c")
    db = tmp_path / "live.db"
    tmux.start(trace_shell_command(standin, db, [str(exe), "100000000"]))
    # when the live view shows the runtime table with cudaLaunchKernel
    live = tmux.wait_for(shows_live_runtime_table, timeout=60)
    # then it is the full screen, with every part
    assert "gpuscope trace ·" in live
    assert "System  CPU [" in live
    assert "CUDA Driver ·" in live
    assert "Host ·" in live
    assert "count since start" in live
    # and when Ctrl-C is pressed
    tmux.tmux("send-keys", "-t", "t", "C-c")
    done = tmux.wait_for(lambda s: "EXIT=" in s, timeout=60)
    # then the view has closed and the end-of-run summary, the database and the next step are printed
    assert EXPLAIN_NEXT in done
    assert f"recorded to {db}" in done
    summary = done[done.index("CUDA Runtime") :]
    assert "cudaLaunchKernel" in summary
    assert "Traceback" not in done
    run = TraceRun(db, 0, "", "")
    assert run.op_counts()["cudaLaunchKernel"] > 0


def test_live_view_closes_by_itself_when_the_workload_ends(
    tmux: Tmux,
    standin: StandinLibs,
    build_workload,
    tmp_path: Path,
) -> None:
    # given a workload of 1,500 iterations, each with a 2 ms synchronize (3 s or more)
    exe = build_workload("cuda_calls.c")
    db = tmp_path / "ends.db"
    tmux.start(trace_shell_command(standin, db, [str(exe), "1500"], latency="cudaStreamSynchronize=2ms:sleep"))
    # when it runs to its end
    tmux.wait_for(shows_live_runtime_table, timeout=60)
    done = tmux.wait_for(lambda s: "EXIT=" in s, timeout=90)
    # then the summary follows with every call counted, and the command's exit status is passed on
    assert "EXIT=0" in done
    assert EXPLAIN_NEXT in done
    assert "1,500" in done[done.index("CUDA Runtime") :]
    assert TraceRun(db, 0, "", "").op_counts()["cudaLaunchKernel"] == 1_500


def test_a_commands_output_to_the_terminal_is_shown_as_it_comes_between_status_lines(
    tmux: Tmux,
    standin: StandinLibs,
    build_workload,
    tmp_path: Path,
) -> None:
    # given a job that prints to the terminal before, during and after its CUDA work
    exe = build_workload("cuda_calls.c")
    db = tmp_path / "out.db"
    job = f"echo START; {shlex.quote(str(exe))} 1500 >/dev/null; echo MIDDLE; sleep 1.5; echo END"
    tmux.start(trace_shell_command(standin, db, ["sh", "-c", job], "cudaStreamSynchronize=1ms:sleep", output=""))
    # then its lines appear while it runs, not hidden behind a full screen
    during = tmux.wait_for(lambda s: "MIDDLE" in s, timeout=60)
    assert "START" in during and "EXIT=" not in during
    # and every one of them is still there at the end, in order, with the status lines and the summary
    done = tmux.wait_for(lambda s: "EXIT=" in s, timeout=90)
    assert done.index("START") < done.index("MIDDLE") < done.index("END") < done.index(EXPLAIN_NEXT)
    assert "live view: a status line a second, between the command's own output" in done
    assert "EXIT=0" in done


def test_a_commands_stderr_under_the_full_screen_is_shown_there_and_all_of_it_kept_after(
    tmux: Tmux,
    standin: StandinLibs,
    build_workload,
    tmp_path: Path,
) -> None:
    # given a job whose stdout goes to a file (so the full screen is drawn) and which writes to stderr before,
    # during and after its CUDA work, one line a progress bar's way (redrawn with carriage returns)
    exe = build_workload("cuda_calls.c")
    db, log = tmp_path / "err.db", tmp_path / "train.log"
    job = (
        f"echo OUT; echo ERR-START >&2; {shlex.quote(str(exe))} 3000 >/dev/null; "
        "printf 'step 1\\rstep 2\\rERR-STEP-3\\n' >&2; [ -t 2 ] && echo ERR-IS-A-TERMINAL >&2; "
        "sleep 1.5; echo ERR-END >&2"
    )
    tmux.start(trace_shell_command(standin, db, ["sh", "-c", job], "cudaStreamSynchronize=1ms:sleep", output=str(log)))
    # then while it runs the full screen shows its last stderr lines under the findings
    during = tmux.wait_for(lambda s: "The command's stderr" in s and "ERR-STEP-3" in s, timeout=60)
    assert "gpuscope trace ·" in during and "count since start" in during and "EXIT=" not in during
    # and once the screen has closed every line follows in order, before the summary; its stderr was a terminal
    done = tmux.wait_for(lambda s: "EXIT=" in s, timeout=90)
    order = ["ERR-START", "ERR-STEP-3", "ERR-IS-A-TERMINAL", "ERR-END", EXPLAIN_NEXT]
    assert [done.index(x) for x in order] == sorted(done.index(x) for x in order), done
    assert "EXIT=0" in done and log.read_text() == "OUT\n"


def test_piped_trace_prints_one_plain_line_per_second_on_stderr(
    standin: StandinLibs,
    build_workload,
    tmp_path: Path,
) -> None:
    exe = build_workload("cuda_calls.c")
    db = tmp_path / "plain.db"
    p = run_gpuscope(
        "trace",
        "--db",
        str(db),
        "--lib",
        str(standin.cudart),
        "--lib",
        str(standin.cuda),
        "--",
        str(exe),
        "1500",
        env=standin.env(cudaStreamSynchronize="2ms:sleep"),
    )
    assert p.returncode == 0, p.stderr
    interval_lines = [line for line in p.stderr.splitlines() if line.startswith("[") and "events (" in line]
    assert interval_lines, p.stderr
    # the summary is on stderr too: stdout is the workload's alone
    assert "cudaLaunchKernel" in p.stderr
    assert EXPLAIN_NEXT in p.stderr
    assert p.stdout == "done 1500 x 1\n"
    assert "\x1b[" not in p.stdout + p.stderr  # no terminal control codes when piped


def test_json_trace_streams_only_json_objects_into_its_file(
    standin: StandinLibs,
    build_workload,
    tmp_path: Path,
) -> None:
    exe = build_workload("cuda_calls.c")
    db, stream = tmp_path / "json.db", tmp_path / "live.jsonl"
    p = run_gpuscope(
        "trace",
        "--json",
        "-o",
        str(stream),
        "--db",
        str(db),
        "--lib",
        str(standin.cudart),
        "--lib",
        str(standin.cuda),
        "--",
        str(exe),
        "1500",
        env=standin.env(cudaStreamSynchronize="2ms:sleep"),
    )
    assert p.returncode == 0, p.stderr
    # the workload's output alone on stdout; every line of the stream is a JSON object
    assert p.stdout == "done 1500 x 1\n"
    objects = [json.loads(line) for line in stream.read_text().splitlines()]
    intervals = [o for o in objects if o["type"] == "interval"]
    assert len(intervals) >= 2
    last = intervals[-1]
    launches = next(op for op in last["ops"] if op["op"] == "cudaLaunchKernel")
    assert (launches["layer"], launches["count"]) == ("cuda", 1_500)
    assert objects[-1] == {
        "type": "end",
        "events": last["events"],
        "dropped": 0,
        "db": str(db),
        "session": objects[-1]["session"],
    }
    assert EXPLAIN_NEXT in p.stderr
