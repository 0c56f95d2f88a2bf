"""The web page's workflow views in a real browser (headless Chromium through Playwright)
against a real stack: the workflows list with schedules, Run now (a double click makes one
run), Pause stopping the schedule's next slots and Resume, a workflow's history grid paged
back, its versions and their diff, Retry on a failed run, what each runner holds, and the
runner pods."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunnerPod, encode
from playwright.async_api import Browser, Locator, expect

from tests.support.stack import Stack, StackFactory
from tests.support.web_page import WAIT, open_page, shot, with_token

EVERY_MINUTE = "* * * * *"


async def history(s: Stack, name: str) -> list[dict[str, Any]]:
    status, body = await s.request("GET", f"/api/workflows/{name}/runs?limit=1000")
    assert status == 200, body
    return body["runs"]


async def ids_of(columns: Locator) -> list[str]:
    return await columns.evaluate_all("els => els.map(e => e.dataset.run)")


async def register(s: Stack, doc: dict[str, Any]) -> None:
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status in (200, 201), body


@pytest.mark.timeout(240)
async def test_workflows_list_run_now_pause_and_resume(
    stack: StackFactory, browser: Browser
) -> None:
    # The scheduler's clock runs 60x: an every-minute schedule fires each second.
    s = await stack(runners=2, HEDDLE_CRON_TICK="0.1", HEDDLE_CRON_TIME_SCALE="60")
    step = [{"id": "hello", "command": "echo hi"}]
    await register(s, {"name": "minutely", "schedule": EVERY_MINUTE, "steps": step})
    await register(s, {"name": "control", "schedule": EVERY_MINUTE, "steps": step})
    await register(
        s,
        {
            "name": "nightly",
            "schedule": "30 2 * * *",
            "timezone": "Europe/Paris",
            "description": "the nightly export",
            "steps": step,
        },
    )
    await register(s, {"name": "manual", "steps": step})
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/workflows"), errors)

    row = page.locator('tr[data-workflow="nightly"]')
    await expect(row.locator(".schedule")).to_contain_text("30 2 * * *", timeout=WAIT)
    await expect(row.locator(".schedule")).to_contain_text("Europe/Paris")
    await expect(row.locator(".next-fires time")).to_have_count(3)
    _, listed = await s.request("GET", "/api/workflows")
    fires = next(w for w in listed["workflows"] if w["name"] == "nightly")["nextFires"]
    shown = row.locator(".next-fires time")
    assert await shown.evaluate_all("els => els.map(e => e.getAttribute('datetime'))") == fires
    await expect(row).to_contain_text("v1")
    await expect(page.locator('tr[data-workflow="manual"] .schedule')).to_contain_text("manual")
    await expect(page.locator('tr[data-workflow="manual"] [data-pause]')).to_be_hidden()

    # Its own page shows the same next fire times, read from GET /api/workflows/nightly
    # alone: the page does not read the whole list for one workflow.
    lists: list[str] = []
    page.on(
        "request",
        lambda r: lists.append(r.url) if urlparse(r.url).path == "/api/workflows" else None,
    )
    await row.locator("a.mono", has_text="nightly").click()
    fired = page.locator("#workflow-meta .fires time")
    await expect(fired).to_have_count(3, timeout=WAIT)
    assert await fired.evaluate_all("els => els.map(e => e.getAttribute('datetime'))") == fires
    await expect(page.locator("#workflow-meta")).to_contain_text("the nightly export")
    assert lists == []
    await page.go_back()
    await expect(row.locator(".next-fires time")).to_have_count(3, timeout=WAIT)

    # Run now, double-clicked: one run, the second click answered with the same run.
    await page.locator('[data-run-now="manual"]').dblclick()
    started = page.locator('[data-started="manual"]')
    await expect(started).to_have_count(1, timeout=WAIT)
    run_id = await started.inner_text()
    await s.wait_run(run_id)
    runs = await history(s, "manual")
    assert [r["runId"] for r in runs] == [run_id], runs
    assert runs[0]["trigger"] == "api"
    manual = page.locator('tr[data-workflow="manual"]')
    await expect(manual.locator(".recent .tick")).to_have_count(1, timeout=WAIT)
    await expect(manual.locator(".recent .tick")).to_have_attribute("data-status", "succeeded")
    await expect(manual.locator(".last-run .badge")).to_have_text("succeeded")
    await expect(page.locator('tr[data-workflow="minutely"] .recent .tick').first).to_be_visible(
        timeout=WAIT
    )
    await shot(page, "workflows")

    # Pause: the page says so, and the schedule's next slots make no run.
    minutely = page.locator('tr[data-workflow="minutely"]')
    await minutely.locator("[data-pause]").click()
    await expect(minutely.locator("[data-pause]")).to_have_text("Resume", timeout=WAIT)
    await expect(minutely.locator(".schedule [data-paused]")).to_have_text("paused")
    await expect(minutely.locator(".next-fires")).to_contain_text("none while paused")
    _, detail = await s.request("GET", "/api/workflows/minutely")
    assert detail["paused"] is True
    paused_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 1))  # a tick's margin
    # The control schedule goes on: three of its runs after the pause show the scheduler
    # ticked past several of the paused one's slots.
    deadline = time.monotonic() + 60
    while len([r for r in await history(s, "control") if r["createdAt"] > paused_at]) < 3:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)
    late = [r for r in await history(s, "minutely") if r["createdAt"] > paused_at]
    assert late == [], late
    await shot(page, "workflows-paused")

    # Resume: slots run again (the paused ones are not backfilled).
    await minutely.locator("[data-pause]").click()
    await expect(minutely.locator("[data-pause]")).to_have_text("Pause", timeout=WAIT)
    resumed_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    while not [r for r in await history(s, "minutely") if r["createdAt"] > resumed_at]:
        assert time.monotonic() < deadline + 60
        await asyncio.sleep(0.2)
    await expect(minutely.locator(".next-fires time")).to_have_count(3, timeout=WAIT)
    assert errors == []


@pytest.mark.timeout(300)
async def test_workflow_grid_pages_versions_diff_and_retry(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    flag = tmp_path / "fixed"
    v1 = {
        "name": "etl",
        "params": [{"name": "fail", "default": "no"}],
        "env": {"FIXED": str(flag)},
        "steps": [
            {"id": "extract", "command": "echo extract"},
            {"id": "load", "command": "echo load", "dependsOn": ["extract"]},
        ],
    }
    await register(s, v1)
    check = '[ "$HEDDLE_PARAM_FAIL" != yes ] || [ -e "$FIXED" ]'
    v2 = {
        **v1,
        "steps": [
            {"id": "extract", "command": "echo extract"},
            {"id": "load", "command": check, "dependsOn": ["extract"], "retries": 0},
            {"id": "report", "command": "echo report", "dependsOn": ["load"]},
        ],
    }
    await register(s, v2)
    made: list[str] = []
    for i in range(7):
        body = {"params": {"fail": "yes" if i in (1, 5) else "no"}}
        status, answer = await s.request("POST", "/api/workflows/etl/runs", json=body)
        assert status == 201, answer
        await s.wait_run(answer["runId"])
        made.append(answer["runId"])
    newest = made[::-1]
    await s.wait_history("etl", 5)
    deadline = time.monotonic() + 30
    while len([r for r in await history(s, "etl") if r["finishedAt"]]) < 7:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)

    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/workflows/etl?limit=5"), errors)
    columns = page.locator("#run-grid th.run-col")
    await expect(columns).to_have_count(5, timeout=WAIT)
    # The recent runs, oldest on the left, from the workflow's own document.
    ticks = page.locator("#workflow-meta .strip .tick")
    await expect(ticks).to_have_count(7, timeout=WAIT)
    shown = await ticks.evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert shown == [f"#/runs/{r}" for r in made]
    # Oldest on the left: the five newest runs, newest on the right.
    assert await ids_of(columns) == newest[:5][::-1]
    await expect(page.locator("#run-grid tbody tr")).to_have_count(3)
    for run_id, fails in ((made[5], True), (made[6], False)):
        cell = page.locator(f'#run-grid td[data-run="{run_id}"][data-step="load"] a')
        await expect(cell).to_have_attribute("data-state", "failed" if fails else "succeeded")
        report = page.locator(f'#run-grid td[data-run="{run_id}"][data-step="report"] a')
        await expect(report).to_have_attribute("data-state", "skipped" if fails else "succeeded")
    await shot(page, "workflow")

    # Older: the two oldest runs; Newer: back.
    await page.locator("#grid-older").click()
    await expect(columns).to_have_count(2, timeout=WAIT)
    assert await ids_of(columns) == made[:2]
    await expect(page.locator("#grid-older")).to_be_disabled()
    await page.locator("#grid-newer").click()
    await expect(columns).to_have_count(5, timeout=WAIT)

    # The versions: v2's steps, and what changed from v1.
    await expect(page.locator("#version-steps-table tbody tr")).to_have_count(3, timeout=WAIT)
    diff = page.locator("#diff-list li")
    await expect(diff.filter(has_text="report")).to_have_attribute("data-kind", "added")
    await expect(diff.filter(has_text="load.command")).to_have_attribute("data-kind", "changed")
    await page.locator("#version").select_option("1")
    await expect(page.locator("#version-steps-table tbody tr")).to_have_count(2, timeout=WAIT)

    # A failed cell opens that step's log.
    failed = made[5]
    await page.locator(f'#run-grid td[data-run="{failed}"][data-step="load"] a').click()
    await page.wait_for_url(f"**#/runs/{failed}/steps/load", timeout=WAIT)
    await expect(page.locator("#step-status")).to_have_text("failed", timeout=WAIT)
    await expect(page.locator("#log-state")).to_contain_text("Step ended: failed", timeout=WAIT)

    # Retry from the run's page: a new run that runs load again, extract carried over.
    await page.locator(".crumbs a", has_text=failed).click()
    await expect(page.locator("#run-status")).to_have_text("failed", timeout=WAIT)
    await expect(page.locator("#retry")).to_be_visible()
    flag.touch()
    await page.locator("#retry").click()
    await page.wait_for_url(f"**#/runs/{failed}-retry", timeout=WAIT)
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator("#retry-of")).to_have_text(failed)
    await expect(page.locator("#retry")).to_be_hidden()
    retried = await s.run(f"{failed}-retry")
    by_id = {st["id"]: st for st in retried["steps"]}
    original = {st["id"]: st for st in (await s.run(failed))["steps"]}
    # extract is carried over, not run again: the failed run's attempt, the same one.
    assert by_id["extract"]["attempts"] == original["extract"]["attempts"]
    assert by_id["extract"]["status"] == "succeeded"
    assert by_id["load"]["attempt"] == 1 and by_id["report"]["status"] == "succeeded"
    await shot(page, "run-retried")
    await page.locator("#retry-of").click()
    await expect(page.locator("#retried-by")).to_have_text(f"{failed}-retry", timeout=WAIT)
    await expect(page.locator("#retry")).to_be_visible()
    assert errors == []


@pytest.mark.timeout(180)
async def test_runners_show_the_step_held_for_how_long_and_pod_and_node(
    stack: StackFactory, browser: Browser
) -> None:
    s = await stack(runners=0)
    s.start("runner-0", POD_NAME="heddle-runner-0", NODE_NAME="node-a")
    s.start("runner-1")
    await s.wait_ready(2)
    run_id = await s.submit({"runId": "held", "steps": [{"id": "long", "command": "sleep 60"}]})
    step = await s.wait_step(run_id, "long", {"running"})
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/runners"), errors)
    busy = page.locator(f'tr[data-runner="{step["runner"]}"]')
    await expect(busy.locator(".badge")).to_have_text("busy", timeout=WAIT)
    await expect(busy.locator(".holds a")).to_have_text("held / long")
    await expect(busy.locator(".holds")).to_contain_text("attempt 1")
    await expect(busy.locator(".held-for > span")).to_have_attribute(
        "title", f"since {step['startedAt']}"
    )
    await expect(busy.locator(".held-for")).to_contain_text(" s", timeout=WAIT)
    pod = page.locator('tr[data-runner="runner-0"]')
    await expect(pod.locator(".pod")).to_have_text("heddle-runner-0")
    await expect(pod.locator(".node")).to_have_text("node-a")
    await expect(page.locator('tr[data-runner="runner-1"] .pod')).to_have_text("\u2013")
    await shot(page, "runners")
    await busy.locator(".holds a").click()
    await page.wait_for_url("**#/runs/held/steps/long", timeout=WAIT)
    assert (await s.request("POST", "/api/runs/held/cancel"))[0] == 202
    assert errors == []


@pytest.mark.timeout(180)
async def test_runners_page_shows_the_pods_and_one_that_never_registered(
    stack: StackFactory, browser: Browser
) -> None:
    """The pods of GET /api/runners, as the orchestrator's pod watch writes them to
    heddle-pods in a cluster (written here directly, with the stack's superuser)."""
    s = await stack(runners=1)
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/runners"), errors)
    await expect(page.locator('tr[data-runner="runner-0"]')).to_have_count(1, timeout=WAIT)
    await expect(page.locator("#pods")).to_be_hidden()  # no pod outside a cluster

    run_id = await s.submit({"runId": "podded", "steps": [{"id": "long", "command": "sleep 60"}]})
    await s.wait_step(run_id, "long", {"running"})
    nc = await s.connect()
    try:
        kv = await nc.jetstream().key_value(names.PODS_BUCKET)
        pods = [
            RunnerPod(
                name="runner-0-0",
                runner="runner-0",
                phase="Running",
                node="kind-worker",
                ready=True,
                seen_at="2026-01-02T03:04:05.000Z",
            ),
            RunnerPod(
                name="runner-9-0",
                runner="runner-9",
                phase="Running",
                node="kind-worker2",
                restarts=4,
                reason="CrashLoopBackOff",
                last_termination="Error (exit 1)",
                seen_at="2026-01-02T03:04:06.000Z",
            ),
        ]
        for pod in pods:
            await kv.put(pod.name, encode(pod))
    finally:
        await nc.close()

    await expect(page.locator("#pods")).to_be_visible(timeout=WAIT)
    await expect(page.locator("#pods-info")).to_have_text("2 pods, 1 not registered")
    registered = page.locator('tr[data-pod="runner-0-0"]')
    await expect(registered).to_have_attribute("data-registered", "true")
    await expect(registered.locator(".pod-runner .badge")).to_have_text("busy", timeout=WAIT)
    await expect(registered.locator(".holds a")).to_have_text("podded / long")
    await expect(registered.locator(".holds")).to_contain_text("attempt 1")
    await expect(registered.locator(".ready")).to_have_text("yes")
    await expect(registered.locator(".node")).to_have_text("kind-worker")
    await expect(registered.locator(".reason")).to_have_text("\u2013")
    looping = page.locator('tr[data-pod="runner-9-0"]')
    await expect(looping).to_have_attribute("data-registered", "false")
    await expect(looping.locator(".pod-runner .badge")).to_have_text("not registered")
    await expect(looping.locator(".pod-runner")).to_contain_text("runner-9")
    await expect(looping.locator(".reason")).to_have_text("CrashLoopBackOff")
    await expect(looping.locator(".last-termination")).to_have_text("Error (exit 1)")
    await expect(looping.locator(".restarts")).to_have_text("4")
    await expect(looping.locator(".ready")).to_have_text("no")
    await expect(looping.locator(".holds")).to_have_text("\u2013")
    await shot(page, "runners-pods")
    assert (await s.request("POST", f"/api/runs/{run_id}/cancel"))[0] == 202
    assert errors == []
