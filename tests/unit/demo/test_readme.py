"""The README's samples exist, came from the generator, and match the current output formats."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("readme_samples", ROOT / "scripts" / "readme_samples.py")
assert _spec and _spec.loader
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def test_the_readme_has_both_generated_samples() -> None:
    for name in samples.MARKERS:
        assert samples.section(_readme(), name), f"README sample {name!r} is missing: run scripts/readme_samples.py"


def test_the_explain_sample_parses_as_the_current_report_format() -> None:
    from gpuscope.render.explain import _stats_table

    text = samples.section(_readme(), "explain").splitlines()
    assert text[0] == "$ gpuscope explain"
    assert re.match(r"Window: \d{4}-\d\d-\d\d \S+ UTC \(\S+ \S+, [\d,]+ events\): ", text[1])
    # how the recording ended and what tracing cost come next, when there is something to say
    notes = [line for line in text[2:] if line.startswith(("Recording: ", "  fix: ", "Tracer overhead: "))]
    assert text[2 : 2 + len(notes)] == notes
    text = text[len(notes) :]
    assert re.match(r"\d+ finding\(s\): ", text[2])
    assert re.match(r"1\. \[(CRITICAL|HIGH)\] cpu-preemption: ", text[4])
    assert any(line.startswith("   fix: ") for line in text)
    assert "CUDA API summary:" in text
    assert _stats_table([])[0] in text  # the column header the renderer prints today


def test_the_live_sample_has_the_current_live_view_layout() -> None:
    snapshot = (ROOT / "tests" / "unit" / "tui" / "snapshots" / "live_incident_100x30.txt").read_text().splitlines()
    columns = next(line for line in snapshot if line.startswith("Op "))
    text = samples.section(_readme(), "live").splitlines()
    assert text[1].startswith("gpuscope trace · ")
    assert columns.split() == next(line for line in text if line.startswith("Op ")).split()
    assert "CUDA Runtime · " in "\n".join(text) and "Findings" in text


def test_replacing_a_section_keeps_the_markers(tmp_path: Path) -> None:
    text = "a\n<!-- sample:live -->\nold\n<!-- /sample:live -->\nb\n"
    out = samples.replace_section(text, "live", "new")
    assert samples.section(out, "live") == "new"
    assert out.startswith("a\n") and out.endswith("b\n")


def test_the_samples_name_no_path_of_the_machine_that_made_them() -> None:
    for name in samples.MARKERS:
        sample = samples.section(_readme(), name) or ""
        assert samples.machine_paths(sample) == [], name
    # the live view names the recording as the command above it does, not by a folder of the machine
    live = samples.section(_readme(), "live") or ""
    assert live.splitlines()[0] == samples.COMMAND
    assert f" · db {samples.DB_NAME}\n" in live


@pytest.mark.parametrize(
    "text",
    [
        "db /tmp/gpuscope-demo-ab12cd_9/demo.db",  # mkdtemp(prefix="gpuscope-demo-")
        "/tmp/tmpa1b2c3d4/x.db",  # mkdtemp()
        "/tmp/pytest-of-root/pytest-3/test_x0/a.db",
        "/var/tmp/gpuscope-bench-k2j3h4g5/run.db",
        "/home/alice/src/train.py",
        "/Users/bob/x",
        "db /root/.gpuscope/gpuscope.db",
        "lib /srv/clone/src/gpuscope/_standin/libcudart.so.12",  # a source checkout
        f"{ROOT}/README.md",  # this checkout, wherever it is
        f"cd {ROOT} && make demo",
    ],
)
def test_the_machine_path_check_finds_homes_checkouts_and_random_temporary_folders(text: str) -> None:
    assert samples.machine_paths(text) != []


@pytest.mark.parametrize(
    "text",
    [
        "db gpuscope.db",
        "--db /tmp/run.db",  # a name a reader chose in an example
        "…/site-packages/gpuscope/_standin/libcudart.so.12",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "~/.gpuscope/gpuscope.db and ~/.cache/gpuscope/demo/demo.db",
        "src/gpuscope/agent/session.py",
        "the root cause; cgroup /user.slice/gpuscope-demo.scope",
    ],
)
def test_the_machine_path_check_lets_placeholders_and_system_paths_pass(text: str) -> None:
    assert samples.machine_paths(text) == []
