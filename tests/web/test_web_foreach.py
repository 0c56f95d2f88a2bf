"""A loop on the run page, in a real browser (headless Chromium through Playwright): a
forEach step's instances, made after the page read the run's document, appear in its table
and its graph as the run's events name them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.support.stack import StackFactory
from tests.support.web_page import WAIT, with_token


@pytest.mark.timeout(240)
async def test_the_run_page_shows_instances_made_while_it_follows_the_run(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    go, done = tmp_path / "go", tmp_path / "done"
    steps = [
        {"id": "list", "command": f"while [ ! -e '{go}' ]; do sleep 0.05; done"},
        {
            "id": "each",
            "command": f"while [ ! -e '{done}' ]; do sleep 0.05; done",
            "dependsOn": ["list"],
            "forEach": "['x', 'y', 'z']",
        },
    ]
    await s.submit({"runId": "looped", "steps": steps})
    errors: list[str] = []
    page = await browser.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(with_token(s, "/#/runs/looped"))
    await expect(page.locator("#run-live")).to_have_text("Following live", timeout=WAIT)
    await expect(page.locator('tr[data-step="each"] .badge')).to_have_text("pending")

    go.touch()  # list ends: each expands into each[0..2], which the page had never read
    for k in range(3):
        row = page.locator(f'tr[data-step="each[{k}]"]')
        await expect(row).to_have_count(1, timeout=WAIT)
    await expect(page.locator('#dag [data-node="each[1]"]')).to_have_count(1)
    await expect(page.locator('tr[data-step="each"] .badge')).to_have_text("running")
    assert (await s.run("looped"))["status"] == "running"
    done.touch()
    for k in range(3):
        badge = page.locator(f'tr[data-step="each[{k}]"] .badge')
        await expect(badge).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator('#dag [data-node="each[2]"]')).to_have_class(
        re.compile(r"\bst-succeeded\b"), timeout=WAIT
    )
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    assert errors == []
