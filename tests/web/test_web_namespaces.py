"""The page's namespace choice in a real browser (headless Chromium) against a real stack:
with team B's token the page lists B's runs and workflows and nothing of team A's, even by
its address, and a token of two namespaces switches between them."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.namespaces import granted_token, stack_of_teams
from tests.support.stack import Stack, StackFactory
from tests.support.web_page import WAIT, open_page, shot, with_token

STEPS = [{"id": "hello", "command": "echo secret-of-$HEDDLE_RUN_ID"}]


async def fill(s: Stack, namespace: str, run: str, workflow: str) -> None:
    await s.submit({"namespace": namespace, "runId": run, "steps": STEPS})
    doc = {"namespace": namespace, "name": workflow, "steps": STEPS}
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == 201, body


async def shown_runs(page: Page) -> list[str]:
    rows = page.locator("#runs-body tr[data-run]")
    return await rows.evaluate_all("els => els.map(e => e.dataset.run)")


@pytest.mark.timeout(180)
async def test_the_page_shows_a_namespace_nothing_of_another(
    stack: StackFactory, browser: Browser
) -> None:
    s = await stack_of_teams(stack)
    await fill(s, "team-a", "a-run", "a-flow")
    await fill(s, "team-b", "b-run", "b-flow")
    b_token = await granted_token(s.base, s.admin_token, "b", {"team-b": "operator"})
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/runs", b_token), errors)
    await expect(page.locator("#runs-body tr[data-run='b-run']")).to_be_visible(timeout=WAIT)
    assert await shown_runs(page) == ["b-run"]
    assert await page.locator("#namespace").input_value() == "team-b"
    await page.goto(with_token(s, "/#/workflows", b_token))
    await expect(page.locator("tr[data-workflow='b-flow']")).to_be_visible(timeout=WAIT)
    assert await page.locator("tr[data-workflow='a-flow']").count() == 0
    # Team A's run by its address: the page finds nothing, as for a run that does not exist.
    await page.goto(with_token(s, "/#/runs/a-run", b_token))
    await expect(page.locator("main")).to_contain_text("not found", timeout=WAIT)
    assert "secret-of" not in await page.content()
    await shot(page, "namespaces-b-sees-nothing-of-a")
    assert errors == []


@pytest.mark.timeout(180)
async def test_a_token_of_two_namespaces_switches_between_them(
    stack: StackFactory, browser: Browser
) -> None:
    s = await stack_of_teams(stack)
    await fill(s, "team-a", "a-run", "a-flow")
    await fill(s, "team-b", "b-run", "b-flow")
    both = await granted_token(
        s.base, s.admin_token, "both", {"team-a": "viewer", "team-b": "viewer"}
    )
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/runs", both), errors)
    choice = page.locator("#namespace")
    await expect(choice.locator("option")).to_have_count(2, timeout=WAIT)
    await choice.select_option("team-a")
    await expect(page.locator("#runs-body tr[data-run='a-run']")).to_be_visible(timeout=WAIT)
    assert await shown_runs(page) == ["a-run"]
    await choice.select_option("team-b")
    await expect(page.locator("#runs-body tr[data-run='b-run']")).to_be_visible(timeout=WAIT)
    assert await shown_runs(page) == ["b-run"]
    await page.locator("#runs-body tr[data-run='b-run'] a").click()
    await expect(page.locator("main")).to_contain_text("hello", timeout=WAIT)
    assert errors == []
