"""The dashboard in real headless Chromium: it loads from the token URL, shows a contention run, escapes names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.serve.support import HOSTILE_COMM, HOSTILE_FUNCTION, contention_recording, dashboard, profile_recording

if TYPE_CHECKING:
    from playwright.sync_api import Dialog

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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
        assert page.evaluate("document.querySelectorAll('#timeline svg polyline').length") >= 2
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
    assert problems == []
