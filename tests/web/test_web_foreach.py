"""A loop on the run page, in a real browser (headless Chromium through Playwright): a
forEach step's instances, made after the page read the run's document, are listed under
their step as the run's events name them (open up to ten, else closed to a count by state
with the failed ones listed), and the graph has no node per instance: the step's node counts
them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.stack import Stack, StackFactory
from tests.support.web_page import WAIT, shot, with_token

TIMES = "\u00d7"  # the multiplication sign: a loop's node reads "each <sign>30"


def wait_for(path: Path) -> str:
    return f"while [ ! -e '{path}' ]; do sleep 0.05; done"


def looped(go: Path, command: str, items: str) -> list[dict[str, object]]:
    """``list`` waits for go (so the page reads the run before the loop expands), then
    ``each`` runs command for each of items."""
    return [
        {"id": "list", "command": wait_for(go)},
        {"id": "each", "command": command, "dependsOn": ["list"], "forEach": items},
    ]


async def follow(s: Stack, browser: Browser, run_id: str, errors: list[str]) -> Page:
    """The run's page, once it follows the run live (its errors kept in ``errors``)."""
    page = await browser.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(with_token(s, f"/#/runs/{run_id}"))
    await expect(page.locator("#run-live")).to_have_text("Following live", timeout=WAIT)
    return page


@pytest.mark.timeout(240)
async def test_the_run_page_shows_instances_made_while_it_follows_the_run(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    go, done = tmp_path / "go", tmp_path / "done"
    await s.submit({"runId": "looped", "steps": looped(go, wait_for(done), "['x', 'y', 'z']")})
    errors: list[str] = []
    page = await follow(s, browser, "looped", errors)
    loop_row = page.locator('tr[data-step="each"]')
    await expect(loop_row.locator(".badge")).to_have_text("pending")
    await expect(loop_row.locator(".loop-summary")).to_have_text("for each of ['x', 'y', 'z']")

    go.touch()  # list ends: each expands into each[0..2], which the page had never read
    # Three instances: listed under their step, open.
    await expect(loop_row.locator(".loop-toggle")).to_have_attribute(
        "aria-expanded", "true", timeout=WAIT
    )
    for k in range(3):
        row = page.locator(f'tr[data-step="each[{k}]"]')
        await expect(row).to_have_count(1, timeout=WAIT)
        await expect(row).to_have_attribute("data-parent", "each")
        await expect(row.locator(".item")).to_have_text("item " + "xyz"[k])
    ids = await page.locator("#steps-body tr").evaluate_all("rs => rs.map(r => r.dataset.step)")
    assert ids == ["list", "each", "each[0]", "each[1]", "each[2]"]
    # The graph: no node per instance; the step's node counts them.
    node = page.locator('#dag [data-node="each"]')
    await expect(node).to_have_attribute("data-instances", "3")
    await expect(node.locator("text")).to_have_text(f"each {TIMES}3")
    await expect(page.locator("#dag .node")).to_have_count(2)
    await expect(loop_row.locator(".badge")).to_have_text("running")
    assert (await s.run("looped"))["status"] == "running"
    done.touch()
    for k in range(3):
        badge = page.locator(f'tr[data-step="each[{k}]"] .badge')
        await expect(badge).to_have_text("succeeded", timeout=WAIT)
    await expect(loop_row.locator(".loop-summary")).to_have_text("3 instances: 3 succeeded")
    await expect(node).to_have_class(re.compile(r"\bst-succeeded\b"), timeout=WAIT)
    await expect(node).to_have_attribute("data-ended", "3")
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    assert errors == []


@pytest.mark.timeout(240)
async def test_a_large_loop_is_one_row_with_its_counts_and_its_failed_instances(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    # A window wider than the loop: every instance queued at once, as the counts below say.
    s = await stack(runners=2, HEDDLE_RUN_WINDOW="100")
    go, done = tmp_path / "go", tmp_path / "done"
    # Every instance waits for done; then the last one fails.
    items = "[" + ", ".join(str(k) for k in range(30)) + "]"
    steps = looped(go, wait_for(done) + '; [ "$HEDDLE_ITEM_INDEX" != 29 ]', items)
    steps.append({"id": "after", "command": "true", "dependsOn": ["each"]})
    await s.submit({"runId": "many", "steps": steps})
    errors: list[str] = []
    page = await follow(s, browser, "many", errors)
    await page.locator("#dag svg").evaluate("svg => { svg.dataset.mark = 'first'; }")

    go.touch()
    loop_row = page.locator('tr[data-step="each"]')
    summary = loop_row.locator(".loop-summary")
    toggle = loop_row.locator("button.loop-toggle")
    instances = page.locator('#steps-body tr[data-parent="each"]')
    # Thirty instances, two runners: one row, closed, counting them by state.
    await expect(summary).to_have_text("30 instances: 28 queued, 2 running", timeout=WAIT)
    await expect(toggle).to_have_attribute("aria-expanded", "false")
    await expect(instances).to_have_count(0)
    await expect(page.locator('#steps-body tr[data-step="after"]')).to_have_count(1)
    # The graph: its three steps, none per instance, the loop's node counting them; the
    # same graph as before the loop expanded (not drawn again).
    await expect(page.locator("#dag .node")).to_have_count(3)
    await expect(page.locator('#dag [data-node^="each["]')).to_have_count(0)
    node = page.locator('#dag [data-node="each"]')
    await expect(node).to_have_attribute("data-instances", "30")
    await expect(node.locator("text")).to_have_text(f"each {TIMES}30")
    await expect(page.locator('#dag svg[data-mark="first"]')).to_have_count(1)
    await shot(page, "run-loop-closed")

    await toggle.click()  # opened: every instance, in order, under its step
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await expect(instances).to_have_count(30)
    ids = await page.locator("#steps-body tr").evaluate_all("rs => rs.map(r => r.dataset.step)")
    assert ids == ["list", "each", *(f"each[{k}]" for k in range(30)), "after"]
    await expect(toggle).to_be_focused()
    await toggle.press("Enter")  # closed again, from the keyboard
    await expect(toggle).to_have_attribute("aria-expanded", "false")
    await expect(instances).to_have_count(0)

    done.touch()  # each ends, and each[29] fails: the loop fails, listed under it closed
    await expect(page.locator("#run-status")).to_have_text("failed", timeout=WAIT)
    await expect(summary).to_contain_text("1 failed", timeout=WAIT)
    await expect(summary).to_contain_text("(failed listed below)")
    await expect(instances).to_have_count(1)
    await expect(instances).to_have_attribute("data-step", "each[29]")
    await expect(instances.locator(".badge")).to_have_text("failed")
    await expect(loop_row.locator(".badge")).to_have_text("failed")
    await expect(node).to_have_class(re.compile(r"\bst-failed\b"))
    await expect(node).to_have_attribute("data-ended", "30")
    # The counts are the document's, whichever instances were skipped.
    states = [st["status"] for st in (await s.run("many"))["steps"] if st.get("parent") == "each"]
    parts = [f"{states.count(x)} {x}" for x in ("succeeded", "failed", "skipped") if x in states]
    await expect(summary).to_have_text(f"30 instances: {', '.join(parts)} (failed listed below)")
    await expect(page.locator('#dag svg[data-mark="first"]')).to_have_count(1)
    await shot(page, "run-loop-failed")
    assert errors == []
