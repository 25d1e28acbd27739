"""The README's samples exist, came from the generator, and match the current output formats."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

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
    assert re.match(r"Window: \S+ \S+ \([\d,]+ events\) ending", text[1])
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
    for name in ("live", "explain"):
        sample = samples.section(_readme(), name) or ""
        # a source checkout (``<clone>/src/gpuscope/...``) or the generator's random temporary folder
        assert "/src/gpuscope/" not in sample and "gpuscope-readme-" not in sample, name
