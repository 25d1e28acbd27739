"""Regenerate docs/images/dashboard.png (1400x900), dashboard-phone.png (390x844) and dashboard-finding.png (the
top finding clicked: the timeline zoomed to its band, its evidence chart): the dashboard in headless Chromium over
the synthetic `incident` demo.

Usage: .venv/bin/python scripts/dashboard_screenshot.py  (needs the apt package chromium; `make setup` installs it)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images" / "dashboard.png"
PHONE = ROOT / "docs" / "images" / "dashboard-phone.png"
FINDING = ROOT / "docs" / "images" / "dashboard-finding.png"


def main() -> int:
    chromium = shutil.which("chromium")
    if chromium is None:
        print("error: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "gpuscope.db"
        env = dict(os.environ, HOME=scratch)
        gpuscope = [sys.executable, "-m", "gpuscope"]
        subprocess.run([*gpuscope, "demo", "--synthetic", "incident", "--db", str(db)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        server = subprocess.Popen(
            [*gpuscope, "dashboard", "--db", str(db), "--addr", "127.0.0.1:0", "--json"],
            env=env, stdout=subprocess.PIPE, text=True, cwd=scratch,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            url = json.loads(server.stdout.readline())["url"]
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                for path, size in ((OUT, {"width": 1400, "height": 900}), (PHONE, {"width": 390, "height": 844})):
                    page = browser.new_context(ignore_https_errors=True, viewport=size).new_page()
                    page.goto(url)
                    page.wait_for_selector("#findings li .sev", timeout=30_000)
                    page.wait_for_selector("#timeline canvas", timeout=30_000)
                    # The recording's path is the scratch folder's: shown as the name a user would pass.
                    page.evaluate(
                        "p => { const r = document.getElementById('recording'); "
                        "r.textContent = r.textContent.replace(p, 'gpuscope.db'); }",
                        str(db),
                    )
                    path.parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(path), full_page=False)
                    if path == OUT:
                        page.click("#findings > li:first-child .finding-head")
                        page.wait_for_selector("#findings > li.selected .evidence-chart canvas", timeout=30_000)
                        page.wait_for_timeout(1000)
                        top = page.locator("#timeline").bounding_box()
                        assert top is not None
                        clip = {"x": 0, "y": top["y"] - 40, "width": 1400, "height": 1000}
                        page.screenshot(path=str(FINDING), full_page=True, clip=clip)
                browser.close()
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=15)
    print(f"wrote {OUT.relative_to(ROOT)} and {PHONE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
