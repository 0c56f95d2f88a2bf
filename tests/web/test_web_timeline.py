"""The run page's timeline and why a step waits (docs/web.md), in headless Chromium against a
real stack: a bar per attempt on the row of the runner that ran it, and the sentence of a
step that waits for a runner."""

from __future__ import annotations

import asyncio
from pathlib import Path

from playwright.async_api import Browser, expect

from tests.support.stack import StackFactory
from tests.support.web_page import WAIT, open_page, shot, with_token


async def test_the_timeline_draws_each_attempt_on_its_runner_s_row(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    mark = tmp_path / "failed-once"
    flaky = f"if [ -e {mark} ]; then sleep 0.3; else touch {mark}; exit 1; fi"
    steps = [
        {"id": "a", "command": "sleep 0.3"},
        {"id": "b", "command": flaky, "dependsOn": ["a"], "retries": 1},
        {"id": "c", "command": "sleep 0.3", "dependsOn": ["a"]},
    ]
    run = await s.wait_run(await s.submit({"steps": steps}))
    assert run["status"] == "succeeded", run
    runner_of = {
        (st["id"], at["attempt"]): at["runner"] for st in run["steps"] for at in st["attempts"]
    }
    assert len(runner_of) == 4 and runner_of.keys() >= {("b", 1), ("b", 2)}

    errors: list[str] = []
    page = await open_page(browser, with_token(s, f"/#/runs/{run['runId']}"), errors)
    bars = page.locator("#timeline g.tl-bar")
    await expect(bars).to_have_count(4, timeout=WAIT)
    for (step, attempt), runner in runner_of.items():
        bar = page.locator(
            f'#timeline g.tl-row[data-row="{runner}"] '
            f'g.tl-bar[data-step="{step}"][data-attempt="{attempt}"]'
        )
        await expect(bar).to_have_count(1)
        await expect(bar.locator('rect[data-part="running"]')).to_have_count(1)
    # b's second attempt waited after the first failed (its backoff), then was queued.
    second = page.locator('g.tl-bar[data-step="b"][data-attempt="2"]')
    parts = await second.locator("rect").evaluate_all("rs => rs.map(r => r.dataset.part)")
    assert parts == ["waiting", "queued", "running"]
    await shot(page, "run-timeline")
    assert errors == []


async def test_a_step_waiting_for_a_runner_says_so_on_the_run_page(
    stack: StackFactory, browser: Browser
) -> None:
    s = await stack(runners=1)
    steps = [{"id": "a", "command": "sleep 30"}, {"id": "b", "command": "sleep 30"}]
    run_id = await s.submit({"steps": steps})
    for _ in range(400):  # one runs on the only runner, the other waits for it
        run = await s.run(run_id)
        waiting = [st for st in run["steps"] if "waitingFor" in st]
        if waiting:
            break
        await asyncio.sleep(0.05)
    assert waiting, run
    errors: list[str] = []
    page = await open_page(browser, with_token(s, f"/#/runs/{run_id}"), errors)
    sentence = page.locator(f'tr[data-step="{waiting[0]["id"]}"] .waiting-for')
    await expect(sentence).to_have_text(
        "Every runner of pool default is busy (1 of 1).", timeout=WAIT
    )
    running = next(st for st in run["steps"] if st["id"] != waiting[0]["id"])
    # Not on a runner yet: its bar is on the lane, the other one on runner-0's row.
    lane = page.locator('#timeline g.tl-row[data-row=""] g.tl-bar')
    await expect(lane).to_have_attribute("data-step", waiting[0]["id"])
    on_runner = page.locator('#timeline g.tl-row[data-row="runner-0"] g.tl-bar')
    await expect(on_runner).to_have_attribute("data-step", running["id"])
    assert errors == []
