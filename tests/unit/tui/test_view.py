"""The live view's renderers: screen snapshots (frozen clock, fake collector), plain lines, JSON.

The expected screens live in tests/unit/tui/snapshots/. After an intended layout
change, regenerate them with ``GPUSCOPE_UPDATE_SNAPSHOTS=1 pytest
tests/unit/tui/test_view.py``, read the diff, and commit it.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from gpuscope.model.ops import Op
from gpuscope.platform.system import SystemStats
from gpuscope.tui.live_findings import DropFindings, TailLatencyFindings
from gpuscope.tui.live_snapshot import Header, LiveSnapshot, SnapshotBuilder
from gpuscope.tui.output import OutputMode, choose_mode
from gpuscope.tui.screen import render_screen
from gpuscope.tui.view import JsonView, PlainView, plain_line
from tests.unit.tui.fakes import FakeCollector, FixedSystem, FrozenClock

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("GPUSCOPE_UPDATE_SNAPSHOTS") == "1"


def screen_text(snap: LiveSnapshot, width: int, height: int | None = None) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(render_screen(snap, height, width))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def assert_matches_snapshot(text: str, name: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path}; run with GPUSCOPE_UPDATE_SNAPSHOTS=1 and review it"
    assert text == path.read_text(), f"screen differs from {path}:\n{text}"


def incident_snapshot() -> LiveSnapshot:
    """Twelve seconds of a training loop; in the last few, `stress` preempts it and syncs stall."""
    collector, clock = FakeCollector(), FrozenClock()
    builder = SnapshotBuilder(
        collector,
        lambda s: None,
        findings=[DropFindings(), TailLatencyFindings({4711: "stress"}.get)],
        system=FixedSystem(),
        clock=clock,
    )
    snap = None
    for second in range(12):
        stalled = second >= 9
        collector.add(Op.cudaLaunchKernel, [5_200] * 900 + [12_000] * 80 + [18_000] * 20)
        collector.add(Op.cudaMemcpyAsync, [9_000] * 200)
        collector.add(Op.cudaStreamSynchronize, [2_000_000] * 95 + [142_000_000 if stalled else 3_000_000] * 5)
        collector.add(Op.cuLaunchKernel, [4_800] * 1_000)
        collector.add(Op.cuMemcpyAsync, [7_000] * 200)
        collector.add(Op.sched_wakeup, [0] * 40)
        if second == 0:
            collector.add(Op.cudaMalloc, [125_000] * 10 + [8_400_000] * 2)
            collector.add(Op.cuMemAlloc, [98_000] * 12)
            collector.add(Op.process_exec, [0])
        if stalled:
            collector.preempt(4711, [2_100_000] * 8)
        else:
            collector.add(Op.sched_switch, [300_000] * 20)
        clock.advance(1.0)
        snap = builder.build()
    assert snap is not None
    return snap


def starting_snapshot() -> LiveSnapshot:
    collector, clock = FakeCollector(Header(targets="pids: 4821", db_path="/tmp/gpuscope.db")), FrozenClock()
    builder = SnapshotBuilder(
        collector,
        lambda s: None,
        system=FixedSystem(SystemStats(None, 12.5, 60 << 30, 0.15, 0, 4)),
        clock=clock,
    )
    clock.advance(1.0)
    return builder.build()


def test_full_screen_of_an_incident_matches_the_snapshot() -> None:
    assert_matches_snapshot(screen_text(incident_snapshot(), 120), "live_incident_120.txt")


def test_screen_cut_to_a_short_terminal_keeps_every_layer_and_says_what_is_hidden() -> None:
    text = screen_text(incident_snapshot(), 100, height=30)
    assert_matches_snapshot(text, "live_incident_100x30.txt")
    assert len(text.splitlines()) <= 30
    assert "… 2 more" in text


def test_screen_before_any_event_shows_the_header_and_empty_layers() -> None:
    text = screen_text(starting_snapshot(), 100)
    assert_matches_snapshot(text, "live_starting_100.txt")
    assert "CUDA Runtime · 0 probes · no events yet" in text


def test_narrow_screen_leaves_out_p95_and_still_fits() -> None:
    text = screen_text(incident_snapshot(), 80, height=40)
    assert_matches_snapshot(text, "live_incident_80x40.txt")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "p95" not in text


def test_incident_screen_shows_the_tail_flag_and_the_preemption_finding() -> None:
    text = screen_text(incident_snapshot(), 120)
    sync = next(line for line in text.splitlines() if line.startswith("cudaStreamSynchronize"))
    assert "⚠ p99" in sync
    assert "— 24 preemptions by `stress` (pid 4711), avg 2.1 ms off-CPU" in text


PLAIN = re.compile(
    r"^\[\s*(?P<elapsed>\d+)s\] (?P<events>[\d,]+) events \((?P<rate>[\d,]+)/s\), (?P<dropped>[\d,]+) dropped"
    r" \| cpu (?P<cpu>\d+|\?)%? mem (?P<mem>\d+)% load (?P<load>[\d.]+)"
    r"(?: \| top (?P<top>\w+) [\d.,]+/s p99 [\d.]+ \S+)?(?: \| ⚠ (?P<flagged>.+))?$"
)


def test_plain_line_parses_back_to_the_snapshot_numbers() -> None:
    snap = incident_snapshot()
    m = PLAIN.match(plain_line(snap))
    assert m, plain_line(snap)
    assert int(m["elapsed"]) == 12
    assert int(m["events"].replace(",", "")) == snap.events
    assert int(m["rate"].replace(",", "")) == round(snap.events_per_s)
    assert (m["dropped"], m["cpu"], m["mem"], m["load"]) == ("0", "47", "72", "3.20")
    assert m["top"] == "cudaStreamSynchronize"
    assert m["flagged"] == "cudaStreamSynchronize p99"


def test_plain_view_prints_one_line_per_interval_and_a_finding_when_it_appears() -> None:
    out = io.StringIO()
    view = PlainView(out)
    snap = incident_snapshot()
    view.post(snap)
    view.post(snap)
    lines = out.getvalue().splitlines()
    assert [bool(PLAIN.match(line)) for line in lines] == [True, False, True]
    assert lines[1].startswith("  ⚠ cudaStreamSynchronize p99 = 142.0 ms")


def test_plain_view_for_a_service_log_prints_a_status_line_every_n_intervals_and_findings_at_once() -> None:
    # given a view asked for a line every 3 intervals, and one asked for none
    every3, none = io.StringIO(), io.StringIO()
    views = PlainView(every3, every=3), PlainView(none, every=0)
    snap = incident_snapshot()
    # when 6 intervals pass
    for _ in range(6):
        for view in views:
            view.post(snap)
    # then the status lines come every 3rd interval, and the finding as it appears, in both
    lines = every3.getvalue().splitlines()
    assert [bool(PLAIN.match(line)) for line in lines] == [False, True, True]
    assert lines[0].startswith("  ⚠ cudaStreamSynchronize p99")
    assert [line[:6] for line in none.getvalue().splitlines()] == ["  ⚠ cu"]


def test_json_view_writes_one_parseable_object_per_interval() -> None:
    out = io.StringIO()
    view = JsonView(out)
    snap = incident_snapshot()
    view.post(snap)
    view.post(starting_snapshot())
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["type"] == "interval"
    assert first["events"] == snap.events
    assert first["system"] == {
        "cpu_pct": 47.0,
        "mem_pct": 72.0,
        "mem_available_bytes": 11 << 30,
        "load1": 3.2,
        "swap_used_bytes": 0,
    }
    sync = next(op for op in first["ops"] if op["op"] == "cudaStreamSynchronize")
    assert sync["layer"] == "cuda"
    assert sync["flags"] == ["p99"]
    assert sync["p99_ns"] == pytest.approx(142_000_000, rel=0.05)
    assert sync["count"] == 1_200
    assert sync["rate_per_s"] == 100.0
    assert first["findings"] == list(snap.findings)
    assert (second["ops"], second["findings"], second["system"]["cpu_pct"]) == ([], [], None)


@pytest.mark.parametrize(
    ("no_tui", "as_json", "tty", "mode"),
    [
        (False, False, True, OutputMode.TUI),
        (False, False, False, OutputMode.PLAIN),
        (True, False, True, OutputMode.PLAIN),
        (False, True, True, OutputMode.JSON),
        (True, True, False, OutputMode.JSON),
    ],
)
def test_full_screen_only_on_a_terminal_without_flags(no_tui: bool, as_json: bool, tty: bool, mode: OutputMode) -> None:
    assert choose_mode(no_tui=no_tui, json=as_json, terminal=tty) is mode
