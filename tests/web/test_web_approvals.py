"""Approval gates on the web page (docs/approvals.md), in a real browser against a real
stack: a waiting gate's step shows its message with Approve and Reject; an answer (its
comment asked for first) goes to the gateway, and the decision is shown after."""

from __future__ import annotations

from playwright.async_api import Browser, Dialog, expect

from tests.support.approvals import DEPLOY
from tests.support.stack import StackFactory
from tests.support.web_page import WAIT, open_page, shot, with_token


async def test_a_gate_is_approved_from_its_step_page(stack: StackFactory, browser: Browser) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    errors: list[str] = []
    page = await open_page(browser, with_token(s, f"/#/runs/{run_id}/steps/ok"), errors)
    await expect(page.locator("#gate-message")).to_have_text("Ship build 7?", timeout=WAIT)
    await expect(page.locator("#step-status")).to_have_text("waiting")
    await shot(page, "gate-waiting")

    async def comment(dialog: Dialog) -> None:
        await dialog.accept("looks right")

    page.once("dialog", comment)
    await page.locator("#approve").click()
    await expect(page.locator("#gate-decision")).to_contain_text("Approved by", timeout=WAIT)
    await expect(page.locator("#gate-decision")).to_contain_text("looks right")
    await expect(page.locator("#approve")).to_have_count(0)
    run = await s.wait_run(run_id)
    assert run["status"] == "succeeded"
    await shot(page, "gate-approved")
    assert errors == []


async def test_a_dismissed_comment_prompt_answers_nothing(
    stack: StackFactory, browser: Browser
) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(DEPLOY)
    await s.wait_step(run_id, "ok", {"waiting"})
    errors: list[str] = []
    page = await open_page(browser, with_token(s, f"/#/runs/{run_id}/steps/ok"), errors)
    await expect(page.locator("#reject")).to_be_visible(timeout=WAIT)

    async def dismiss(dialog: Dialog) -> None:
        await dialog.dismiss()

    page.once("dialog", dismiss)
    await page.locator("#reject").click()
    await expect(page.locator("#reject")).to_be_enabled()
    assert (await s.run(run_id))["status"] == "running"

    async def no_comment(dialog: Dialog) -> None:
        await dialog.accept("")

    page.once("dialog", no_comment)
    await page.locator("#reject").click()
    await expect(page.locator("#gate-decision")).to_contain_text("Rejected by", timeout=WAIT)
    assert (await s.wait_run(run_id))["status"] == "failed"
    assert errors == []
