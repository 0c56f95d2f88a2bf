"""The web page in headless Chromium (Playwright): its URL with a token, a page opened with its
errors kept, screenshots under test-results/web."""

from __future__ import annotations

import shutil
from urllib.parse import urlencode, urlparse

from playwright.async_api import Browser, Page

from tests.support.stack import REPO, Stack

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WAIT = 30_000  # ms: how long the browser waits for a condition before failing
SHOTS = REPO / "test-results" / "web"  # screenshots of each browser test (ignored by git)


def with_token(s: Stack, path: str, token: str | None = None) -> str:
    """The page's URL with ``?token=`` (the admin's by default) before its fragment."""
    page, _, fragment = path.partition("#")
    url = f"{s.base}{page}?{urlencode({'token': token or s.admin_token})}"
    return url + (f"#{fragment}" if fragment else "")


async def open_page(browser: Browser, url: str, errors: list[str]) -> Page:
    page = await browser.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(url)
    return page


async def shot(page: Page, name: str, full_page: bool = True) -> None:
    """A screenshot of the page as it is, as test-results/web/<name>.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SHOTS / f"{name}.png", full_page=full_page)


def document_reads(page: Page, run_id: str) -> list[str]:
    """Every GET of the run's document the page sends, from now on (not its event stream)."""
    reads: list[str] = []
    page.on(
        "request",
        lambda r: (
            reads.append(r.url)
            if r.method == "GET" and urlparse(r.url).path == f"/api/runs/{run_id}"
            else None
        ),
    )
    return reads
