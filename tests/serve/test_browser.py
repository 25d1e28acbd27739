"""The dashboard in real headless Chromium: it loads from the token URL, shows a contention run, escapes names."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpuscope.model.ops import Op
from tests.serve.support import HOSTILE_COMM, HOSTILE_FUNCTION, contention_recording, dashboard, profile_recording
from tests.unit.analysis.builder import MS, US, Events, steady_training

if TYPE_CHECKING:
    from playwright.sync_api import Dialog

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def million_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of 1M events (explain_bench's generator: two processes, a preemptor, blocks and aggregates)."""
    sys.path.insert(0, str(BENCH))  # explain_bench imports benchlib beside it
    try:
        spec = importlib.util.spec_from_file_location("explain_bench", BENCH / "explain_bench.py")
        assert spec is not None and spec.loader is not None
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(BENCH))
    db = tmp_path_factory.mktemp("million") / "million.db"
    bench.generate(db, 1_000_000)
    return db


@pytest.fixture
def page(tmp_path: Path):
    if CHROMIUM is None:
        pytest.fail("chromium is installed by `make setup` (apt package chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: the tests run as root, where Chromium's sandbox cannot start.
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        # The certificate is the server's self-signed one: TLS itself is tested with real clients in test_security.
        context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 900})
        try:
            yield context.new_page()
        finally:
            browser.close()


def test_the_dashboard_shows_a_contention_run_and_escapes_hostile_names(page, tmp_path: Path) -> None:
    db = contention_recording(tmp_path / "run.db", comm=HOSTILE_COMM)
    problems: list[str] = []

    def on_dialog(d: Dialog) -> None:
        problems.append(f"dialog: {d.message}")
        d.dismiss()

    page.on("dialog", on_dialog)
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    with dashboard(db, tmp_path / "home") as server:
        # when the printed URL is opened
        page.goto(server.info["url"])
        # then the token has left the address bar, and the page fills in from the API
        assert "token=" not in page.url
        page.wait_for_selector("#ops tbody tr", timeout=30_000)
        page.wait_for_selector("#findings li .sev", timeout=30_000)
        findings = page.inner_text("#findings")
        assert "cpu-preemption" in findings and "fix:" in findings
        ops = page.inner_text("#ops")
        assert "cudaStreamSynchronize" in ops and "cudaLaunchKernel" in ops
        # and the hostile process name is shown as text, creating no element
        page.wait_for_selector("#processes tbody tr", timeout=30_000)
        assert HOSTILE_COMM in page.inner_text("#processes")
        assert HOSTILE_COMM in findings
        assert page.evaluate("document.querySelectorAll('svg[onload], img[onerror]').length") == 0
        # the timeline is drawn by the vendored chart library, one series per op, with its axes' units
        page.wait_for_selector("#timeline canvas", timeout=30_000)
        assert page.evaluate("document.querySelectorAll('#timeline .u-legend .u-series').length") >= 3
        # (the canvas draws the axis titles; the box carries them as text too) and its legend gives each
        # op's value with its unit where the cursor is
        assert page.get_attribute("#timeline", "data-axes") == '["time (UTC)","slowest call (log scale)"]'
        over = page.locator("#timeline .u-over").bounding_box()
        assert over is not None
        for x in range(1, 20):
            page.mouse.move(over["x"] + over["width"] * x / 20, over["y"] + over["height"] / 2)
            if any(u in page.inner_text("#timeline .u-legend") for u in (" ms", " µs", " s")):
                break
        legend = page.inner_text("#timeline .u-legend")
        assert any(unit in legend for unit in (" ms", " µs", " s")), legend
        # a recording without on-CPU samples has no profile section
        page.wait_for_selector("#profile-section[data-samples='0']", state="attached", timeout=30_000)
        assert not page.is_visible("#profile-section")
        # a click on a process keeps only its calls and findings, until the chip is clicked
        page.click("#processes tbody tr >> nth=0")
        page.wait_for_selector("#pid-filter:not([hidden])", timeout=10_000)
        assert page.inner_text("#pid-filter").startswith("process 100")
        page.wait_for_selector("#findings li .sev", timeout=30_000)
        page.click("#pid-filter")
        page.wait_for_selector("#pid-filter[hidden]", state="attached", timeout=10_000)
        # the stacks of an op open on a click
        page.click("#ops tbody tr >> nth=0")
        page.wait_for_selector("#stacks-section:not([hidden])", timeout=10_000)
        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert problems == []
    origin = server.info["url"].split("/?", 1)[0]
    assert all(u.startswith(origin) for u in requests), [u for u in requests if not u.startswith(origin)]


def test_the_host_time_section_shows_the_sampled_functions_as_text_and_downloads_speedscope(
    page, tmp_path: Path
) -> None:
    db = profile_recording(tmp_path / "run.db")
    problems: list[str] = []

    def on_dialog(d: Dialog) -> None:
        problems.append(f"dialog: {d.message}")
        d.dismiss()

    page.on("dialog", on_dialog)
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        # when the recording has samples, the section shows its top functions with their shares
        page.wait_for_selector("#profile-section:not([hidden]) #profile tbody tr", timeout=30_000)
        rows = page.locator("#profile tbody tr")
        assert rows.count() == 2
        first = rows.nth(0).inner_text()
        assert HOSTILE_FUNCTION in first and "75.0%" in first and "train.py:42" in first
        assert "default_collate" in rows.nth(1).inner_text()
        # said to be sample counts: estimates
        assert "estimates" in page.inner_text("#profile-note") and "99 a second" in page.inner_text("#profile-note")
        # the function named like markup is text: no element made of it, no script run
        assert page.evaluate("document.querySelectorAll('#profile img, img[onerror]').length") == 0
        assert page.evaluate("document.querySelectorAll('#profile .share').length") == 2
        # and the speedscope file downloads under the recording's name, with the page's own session
        with page.expect_download(timeout=30_000) as got:
            page.click("#profile-download")
        download = got.value
        assert download.suggested_filename == "run.speedscope.json"
        doc = json.loads(Path(download.path()).read_text())
        assert [sum(p["weights"]) for p in doc["profiles"]] == [30, 10]
        # and the flame graph is drawn from the same samples: the process, then its frames
        flame = page.evaluate("fetch('/api/v1/profile').then(r => r.json())")["flame"]
        assert flame["samples"] == 40 and [c["samples"] for c in flame["children"]] == [40]
        canvas = page.locator("#flame")
        assert int(canvas.get_attribute("data-nodes") or "0") >= 4
        # hovering its top row names the whole; the hostile name is canvas text and a tooltip's text only
        box = canvas.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 5)
        assert page.inner_text("#flame-tip").startswith("all: 40 samples")
        # a click on the process's row fills the width with it; one on the top row goes back
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + 18 + 5)
        assert canvas.get_attribute("data-root") != "all"
        box = canvas.bounding_box()  # a shallower graph is a shorter page: where it is drawn may have moved
        assert box is not None
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + 5)
        assert canvas.get_attribute("data-root") == "all"
        assert page.evaluate("document.querySelectorAll('#profile-section img, img[onerror]').length") == 0
    assert problems == []


def _problems(page) -> list[str]:
    """Console errors, page errors and requests that leave the dashboard's origin, collected as they come."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.append(f"page error: {e}"))
    return seen


def test_the_first_screen_says_what_is_wrong_where_and_since_when_without_scrolling(page, tmp_path: Path) -> None:
    # given a contention run, opened at 1400x900
    db = contention_recording(tmp_path / "run.db")
    page.set_viewport_size({"width": 1400, "height": 900})
    problems = _problems(page)
    origins: list[str] = []
    lane_urls: list[str] = []
    page.on("request", lambda r: origins.append(r.url.split("/")[2]))
    page.on("request", lambda r: lane_urls.append(r.url))
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        page.wait_for_selector("#lost-bar span", timeout=30_000)
        page.wait_for_selector("#timeline canvas", timeout=30_000)
        # then the headline figures, the time lost by cause and the top finding, and the timeline drawn with
        # that finding's op, are all on the first screen
        figures = page.inner_text("#figures")
        for label in ("window", "events", "findings", "busiest op", "gpuscope's own cost"):
            assert label in figures, figures
        kinds = page.eval_on_selector_all("#lost-bar span", "spans => spans.map(s => s.dataset.kind)")
        top = page.inner_text("#top-finding")
        assert kinds and any(k in top for k in kinds), (kinds, top)
        assert "cpu-preemption" in top
        # and under the timeline, the traced process's lane: its GPU calls, and the preemption that slowed them
        page.wait_for_selector("#lanes canvas", timeout=30_000)
        pids = page.eval_on_selector_all("#lanes canvas", "c => c.map(x => Number(x.dataset.pid))")
        assert pids[:1] == [100], pids
        # and hovering the lane says who held its CPU while it was preempted, in all and at the pixel pointed at
        title = page.get_attribute("#lanes .lane", "title") or ""
        assert "preempted by cpu_hog (pid 999)" in title, title
        (asked,) = [u for u in lane_urls if "/api/v1/lanes" in u]
        lanes = page.evaluate(f"fetch({json.dumps(asked)}).then(r => r.json())")["lanes"]  # what the page drew
        mine = next(x for x in lanes if x["pid"] == 100)
        top = mine["top_preemptor"] or []
        held = [i for i, p in enumerate(top) if p >= 0]
        free = [i for i, p in enumerate(top) if p < 0]
        assert held and free and mine["held_by"][0] == {"pid": 999, "comm": "cpu_hog"}, mine
        canvas = page.locator("#lanes canvas").first
        box = canvas.bounding_box()
        assert box is not None
        scale = box["width"] / len(top)
        said = []
        for i in [*held[:: max(1, len(held) // 6)], *free[:: max(1, len(free) // 3)]]:
            canvas.hover(position={"x": (i + 0.5) * scale, "y": 10})
            tip, at = page.inner_text("#lane-tip"), int(page.get_attribute("#lane-tip", "data-pixel") or "-1")
            # the tip names who held the CPU at the pixel it says it is over, and nobody where nobody did
            want = top[at] >= 0 and mine["held_by"][top[at]]["comm"] == "cpu_hog"
            assert ("preempted here by cpu_hog (pid 999)" in tip) == want, (tip, at, top[at])
            said.append(want)
        assert any(said) and not all(said), said
        for selector in ("#figures", "#lost-bar", "#top-finding", "#timeline canvas"):
            box = page.locator(selector).first.bounding_box()
            assert box is not None and box["y"] + box["height"] <= 900, (selector, box)
        # and the bar's segments are shares of the window: together at most its whole width
        widths = page.eval_on_selector_all("#lost-bar span", "s => s.map(x => x.getBoundingClientRect().width)")
        bar = page.locator("#lost-bar").bounding_box()
        assert bar is not None and 0 < sum(widths) <= bar["width"] + 1
        # and nothing came from anywhere but the dashboard itself, with no console error
        assert set(origins) == {server.info["url"].split("/")[2]}, set(origins)
        assert problems == []
        shot = tmp_path / "first-screen.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000


def test_dragging_across_the_timeline_reads_that_span_and_a_double_click_the_whole_window_again(
    page, tmp_path: Path
) -> None:
    db = contention_recording(tmp_path / "run.db")
    page.set_viewport_size({"width": 1400, "height": 900})
    problems = _problems(page)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/timeline" in r.url else None)
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        page.wait_for_selector("#timeline .u-over", timeout=30_000)
        over = page.locator("#timeline .u-over").bounding_box()
        assert over is not None
        # when a third of the chart is dragged across
        y = over["y"] + over["height"] / 2
        page.mouse.move(over["x"] + over["width"] * 0.3, y)
        page.mouse.down()
        page.mouse.move(over["x"] + over["width"] * 0.6, y, steps=5)
        page.mouse.up()
        # then the timeline is read again for that span only
        page.wait_for_function("() => true")
        page.wait_for_timeout(1500)
        zoomed = [u for u in asked if "from=" in u and "to=" in u]
        assert zoomed, asked
        # and a double click reads the whole window again
        before = len(asked)
        page.dblclick("#timeline .u-over")
        page.wait_for_timeout(1500)
        assert any("from=" not in u for u in asked[before:]), asked[before:]
        assert problems == []


def test_a_phone_sized_screen_keeps_the_page_readable_without_sideways_scrolling(page, tmp_path: Path) -> None:
    db = contention_recording(tmp_path / "run.db")
    page.set_viewport_size({"width": 390, "height": 844})
    problems = _problems(page)
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        page.wait_for_selector("#timeline canvas", timeout=30_000)
        page.wait_for_selector("#lost-bar span", timeout=30_000)
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 390 + 1
        assert "cpu-preemption" in page.inner_text("#top-finding")
        assert problems == []


def test_each_finding_has_its_evidence_chart_and_a_click_zooms_the_timeline_to_its_band(page, tmp_path: Path) -> None:
    # given a contention run, whose preemption finding has a span and an evidence histogram
    db = contention_recording(tmp_path / "run.db")
    page.set_viewport_size({"width": 1400, "height": 900})
    problems = _problems(page)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/timeline" in r.url else None)
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        page.wait_for_selector("#findings .evidence-chart canvas", timeout=30_000)
        page.wait_for_selector("#timeline .u-over", timeout=30_000)
        findings = page.evaluate("fetch('/api/v1/findings').then(r => r.json())")["findings"]
        window = page.evaluate("fetch('/api/v1/overview').then(r => r.json())")["window"]
        top = findings[0]
        assert top["kind"] == "cpu-preemption" and "span" in top, top
        offset = window["start_wall_ns"] - window["start_ns"]
        want_from, want_to = (top["span"]["start_ns"] + offset) / 1e9, (top["span"]["end_ns"] + offset) / 1e9
        # then the timeline carries one band per finding with a span, the top finding's where its span is
        bands = json.loads(page.get_attribute("#timeline", "data-bands") or "[]")
        band = next(b for b in bands if b["id"] == top["id"])
        assert abs(band["from"] - want_from) < 1e-6 and abs(band["to"] - want_to) < 1e-6, (band, want_from, want_to)
        # and the finding's evidence chart has titled axes and holds the calls its effect size counts
        chart = page.locator("#findings > li").first.locator(".evidence-chart")
        assert json.loads(chart.get_attribute("data-axes") or "[]") == ["call duration (log scale)", "share of calls"]
        effect = top["causes"][0]["effect"]
        calls = json.loads(chart.get_attribute("data-calls") or "{}")
        assert calls == {"affected": effect["affected_calls"], "unaffected": effect["unaffected_calls"]}, calls
        # when the finding is clicked
        before = len(asked)
        page.click("#findings > li:first-child .finding-head")
        page.wait_for_function(
            "() => document.querySelector('#findings > li.selected') && document.querySelector('#timeline canvas')"
        )
        page.wait_for_timeout(1500)
        # then the timeline is read again for the finding's span (with a margin) and drawn over it
        zoomed = [u for u in asked[before:] if "from=" in u and "to=" in u]
        assert zoomed, asked[before:]
        x = page.evaluate("(() => { const u = plot.scales.x; return [u.min, u.max]; })()")
        length = want_to - want_from
        assert x[0] <= want_from and x[1] >= want_to, (x, want_from, want_to)
        assert x[1] - x[0] <= length * 1.5 + 2e-3, (x, length)
        # and a second click goes back to the whole window
        before = len(asked)
        page.click("#findings > li:first-child .finding-head")
        page.wait_for_timeout(1500)
        assert any("from=" not in u for u in asked[before:]), asked[before:]
        assert problems == []


def test_a_million_event_recording_draws_its_first_screen_from_reduced_answers(
    page, tmp_path: Path, million_events: Path
) -> None:
    # given a recording of a million events, opened at 1400x900
    page.set_viewport_size({"width": 1400, "height": 900})
    problems = _problems(page)
    sizes: dict[str, int] = {}

    def note(response) -> None:
        path = response.url.split("/api/v1/", 1)[-1].split("?", 1)[0]
        if "/api/v1/" in response.url and path in ("timeline", "lanes"):
            sizes[path] = len(response.body())

    page.on("response", note)
    with dashboard(million_events, tmp_path / "home") as server:
        page.goto(server.info["url"])
        # then its first screen is drawn: the figures count every event, the timeline and the lanes are there
        page.wait_for_selector("body[data-drawn-ms]", timeout=120_000)
        assert "1,000,000" in page.inner_text("#figures")
        assert page.locator("#timeline canvas").count() >= 1
        lanes = page.eval_on_selector_all("#lanes canvas", "c => c.map(x => [Number(x.dataset.pid), x.width])")
        assert 4242 in {pid for pid, _ in lanes}, lanes
        # and the server sent the time views reduced to the pixels asked for, not the events
        assert all(width <= 2000 for _, width in lanes), lanes
        # and a process of several threads is one lane until its name is clicked, then one lane per thread
        process = page.locator("#lanes .lane.process", has_text="4242").first
        threads = int(str(process.inner_text()).split("(", 1)[1].split(" ", 1)[0])
        assert threads > 1 and page.locator("#lanes .lane.thread").count() == 0
        process.locator(".lane-name").click()
        assert page.locator("#lanes .lane.thread").count() == threads
        assert set(sizes) == {"timeline", "lanes"}, sizes
        assert sizes["lanes"] < 400_000 and sizes["timeline"] < 200_000, sizes
        # and the findings have their evidence, with no console error
        page.wait_for_selector("#findings .finding-head", timeout=30_000)
        assert problems == []


def test_a_click_on_the_timeline_lists_that_intervals_slowest_calls_as_text(page, tmp_path: Path) -> None:
    # given the contention run (its process named like markup), opened at 1400x900
    db = contention_recording(tmp_path / "run.db")
    page.set_viewport_size({"width": 1400, "height": 900})
    problems = _problems(page)
    asked: list[str] = []
    timelines: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/calls" in r.url else None)
    page.on("request", lambda r: timelines.append(r.url) if "/api/v1/timeline" in r.url else None)
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        page.wait_for_selector("#timeline .u-over", timeout=30_000)
        over = page.locator("#timeline .u-over").bounding_box()
        assert over is not None and timelines
        # when the chart is clicked a fifth of the way in (a click: no drag)
        page.mouse.click(over["x"] + over["width"] * 0.2, over["y"] + over["height"] / 2)
        page.wait_for_selector("#calls details.call", timeout=30_000)
        # then the slowest calls of that interval are listed, slowest first, from one request for that interval
        assert len(asked) == 1 and "from=" in asked[0] and "to=" in asked[0], asked
        answer = page.evaluate(f"fetch('{asked[0]}').then(r => r.json())")
        durations = [c["duration_ns"] for c in answer["calls"]]
        assert durations and durations == sorted(durations, reverse=True)
        items = page.locator("#calls details.call")
        assert items.count() == len(durations)
        assert answer["calls"][0]["op"] in items.first.inner_text()
        # and a call without a stack says so; its thread's name is shown as text, never markup
        items.first.locator("summary").click()
        assert "no stack recorded" in items.first.inner_text()
        assert f"{answer['calls'][0]['comm']} (pid 100" in items.first.inner_text()
        assert page.evaluate("document.querySelectorAll('#calls img, #calls script, img[onerror]').length") == 0
        # and the timeline was not zoomed by the click
        assert not any("from=" in u for u in timelines), timelines
        assert problems == []


def test_with_a_baseline_the_page_charts_each_ops_change_against_it(page, tmp_path: Path) -> None:
    # given a healthy run as the baseline, and the same loop with one sync in four preempted for 5 ms
    base = Events()
    steady_training(base, 400)
    baseline = base.to_db(tmp_path / "before.db")
    db = contention_recording(tmp_path / "after.db")
    page.set_viewport_size({"width": 1400, "height": 900})
    problems = _problems(page)
    with dashboard(db, tmp_path / "home", "--baseline", str(baseline)) as server:
        page.goto(server.info["url"])
        # then the comparison is drawn: titled axes, the syncs among the ops charted
        page.wait_for_selector("#diff-section:not([hidden]) #diff-chart canvas", timeout=30_000)
        chart = page.locator("#diff-chart")
        assert json.loads(chart.get_attribute("data-axes") or "[]") == ["op", "this run / baseline (log scale)"]
        charted = json.loads(chart.get_attribute("data-ops") or "[]")
        assert "cudaStreamSynchronize" in charted
        # and the table says what `gpuscope diff` says of them: the syncs' p99 grew
        d = page.evaluate("fetch('/api/v1/diff').then(r => r.json())")
        assert d["baseline"] == str(baseline)
        sync = next(o for o in d["ops"] if o["op"] == "cudaStreamSynchronize")
        assert sync["p99_ratio"] > 1.5, sync
        row = page.locator("#diff tbody tr", has_text="cudaStreamSynchronize").first
        assert sync["change"] in row.inner_text() and "slower" in row.inner_text()
        assert problems == []


def test_without_a_baseline_the_comparison_is_hidden_and_its_answer_says_how_to_get_one(page, tmp_path: Path) -> None:
    db = contention_recording(tmp_path / "run.db")
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        page.wait_for_selector("#timeline canvas", timeout=30_000)
        d = page.evaluate("fetch('/api/v1/diff').then(r => r.json())")
        assert d["baseline"] is None and d["ops"] == [] and "--baseline" in d["notes"][0]
        assert not page.is_visible("#diff-section")


@pytest.mark.parametrize("content", [None, b"not a database"], ids=["missing", "not-sqlite"])
def test_a_bad_baseline_is_one_line_and_no_server_starts(tmp_path: Path, content: bytes | None) -> None:
    # given a good recording and a baseline that is missing or not a recording
    db = contention_recording(tmp_path / "run.db")
    baseline = tmp_path / "before.db"
    if content is not None:
        baseline.write_bytes(content)
    before = db.read_bytes()
    # when the dashboard is asked to compare with it
    p = subprocess.run(
        [sys.executable, "-m", "gpuscope", "dashboard", "--db", str(db), "--baseline", str(baseline),
         "--addr", "127.0.0.1:0", "--json"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, HOME=str(tmp_path)),
    )  # fmt: skip
    # then it stops at once with one error line naming the file, and the recording is untouched
    assert p.returncode != 0 and p.stdout == "", p.stdout
    assert p.stderr.startswith(f"error: {baseline}") and "Traceback" not in p.stderr, p.stderr
    # and its fix is about the baseline, not the recording's --db
    assert "fix: pass --baseline" in p.stderr and "--db" not in p.stderr, p.stderr
    assert db.read_bytes() == before


def test_findings_measured_over_time_draw_their_cause_as_a_line_with_units(page, tmp_path: Path) -> None:
    # given a recording in which pid 100 starves its GPU (idle ~80% after each sync) and pid 200's launch rate
    # falls from 5,000 to 1,000 a second: findings with no per-call comparison to draw
    ev = Events()
    for i in range(300):
        base = i * 10 * MS
        ev.add(Op.cudaLaunchKernel, base, 5 * US)
        ev.add(Op.cudaStreamSynchronize, base + 10 * US, 2 * MS)
    t = 0
    for i in range(17_000):
        t += 200 * US if i < 15_000 else 1000 * US
        ev.add(Op.cudaLaunchKernel, t, 5 * US, pid=200)
    db = ev.to_db(tmp_path / "run.db")
    page.set_viewport_size({"width": 1400, "height": 900})
    problems = _problems(page)
    with dashboard(db, tmp_path / "home") as server:
        page.goto(server.info["url"])
        page.wait_for_selector("#findings .evidence-chart canvas", timeout=30_000)
        findings = page.evaluate("fetch('/api/v1/findings').then(r => r.json())")["findings"]
        kinds = [f["kind"] for f in findings]
        # then each finding is drawn as its cause's measure over time, its axes titled with units
        for kind, axis, unit in (("data-starvation", "GPU idle (%)", "%"), ("throughput-drop", "rate (/s)", "/s")):
            assert kind in kinds, kinds
            item = page.locator("#findings > li").nth(kinds.index(kind))
            chart = item.locator(".evidence-chart")
            assert chart.locator("canvas").count() >= 1
            axes = json.loads(chart.get_attribute("data-axes") or "[]")
            assert axes[0] == "time" and axes[1].endswith(axis), axes
            drawn = json.loads(chart.get_attribute("data-series") or "{}")
            sent = next(c["series"] for c in findings[kinds.index(kind)]["causes"] if "series" in c)
            assert drawn == {"label": sent["label"], "unit": unit, "bins": len(sent["values"])}, (drawn, sent)
        assert problems == []
