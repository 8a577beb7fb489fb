"""The LangServe playground in a real headless Chromium (Debian's `chromium`, driven by playwright), behind an API
key: a browser cannot send the `Authorization` header, so it opens the playground once with `?api_key=KEY` and
the page's own calls carry the cookie that link sets."""

from __future__ import annotations

import shutil

import httpx
import pytest
from servers import EXAMPLES

from maestro_graph.doors.serve import ServeSettings, create_app
from maestro_graph.doors.serve.loopback import running_app

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the `test` extra (scripts/setup.sh)")
CHROMIUM = shutil.which("chromium")
KEY_ENV = "MAESTRO_TEST_PLAYGROUND_KEY"
KEY = "playground-key-1"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/setup.sh installs it)")
def test_playground_runs_a_question_in_a_browser(registry, tmp_path_factory, monkeypatch):
    """Fills the form with a question and uploads an example image, runs it, and finds the answer on the page, in
    one output: the episode's steps and answer as lines.
    The screenshot is saved as `<pytest's base temp>/artifacts/playground.png` (e.g.
    /tmp/pytest-of-root/pytest-N/artifacts/playground.png)."""
    monkeypatch.setenv(KEY_ENV, KEY)
    shot = tmp_path_factory.getbasetemp() / "artifacts" / "playground.png"
    with running_app(create_app(registry, ServeSettings(policy="rules", api_key_env=KEY_ENV))) as url:
        page_url = f"{url}/maestro/playground/"
        assert httpx.get(page_url).status_code == 401
        assert httpx.get(page_url, params={"api_key": "wrong"}).status_code == 401
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(f"{page_url}?api_key={KEY}")
                assert page.url == page_url  # the key left the address bar for an HttpOnly cookie
                page.get_by_label("Question").fill("What text does the QR code encode?")
                page.locator("input[type=file]").set_input_files(str(EXAMPLES / "qrcode.png"))
                page.get_by_role("button", name="Start").click()
                page.get_by_text("answer: Wikipedia").wait_for(timeout=60_000)
                shot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shot), full_page=True)
                body = page.inner_text("body")
                assert "Unknown type" not in body
                # one output (the episode's lines), not the chunks' JSON objects glued: `}{`
                assert "}{" not in body.replace(" ", "").replace("\n", "") and '"steps"' not in body
                assert "zxing@@barcode-reading: Wikipedia" in body
            finally:
                browser.close()
    assert shot.stat().st_size > 0
