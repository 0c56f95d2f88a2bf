"""A call step on the run page, in a real browser (headless Chromium through Playwright):
its row links to its child run, and the child's page links back to its parent
(docs/sub-workflows.md)."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.support.stack import StackFactory
from tests.support.web_page import WAIT, with_token


async def test_a_call_step_links_to_its_child_and_the_child_to_its_parent(
    stack: StackFactory, browser: Browser
) -> None:
    s = await stack(runners=1)
    child = {"name": "child", "steps": [{"id": "make", "command": "true"}]}
    status, body = await s.request("POST", "/api/workflows", json=child)
    assert status == 201, body
    await s.submit({"runId": "calling", "steps": [{"id": "call", "workflow": {"name": "child"}}]})
    run = await s.wait_run("calling")
    child_run = run["steps"][0]["childRun"]
    errors: list[str] = []
    page = await browser.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(with_token(s, "/#/runs/calling"))
    row = page.locator('tr[data-step="call"]')
    await expect(row.locator(".command")).to_contain_text("calls child", timeout=WAIT)
    await row.locator(".child-run").click()
    await page.wait_for_url(f"**#/runs/{child_run}", timeout=WAIT)
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator("#parent-run")).to_have_text("calling")
    await page.locator("#parent-run").click()
    await page.wait_for_url("**#/runs/calling", timeout=WAIT)
    await page.goto(with_token(s, "/#/runs/calling/steps/call"))
    await expect(page.locator("#child-run")).to_have_text(child_run, timeout=WAIT)
    assert errors == []
