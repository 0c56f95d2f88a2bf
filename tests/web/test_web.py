"""The gateway's web page and ``GET /api/runs``, against a real stack: the page and its
assets over HTTP, the runs list, and a real browser (headless Chromium through Playwright)
submitting, watching, following a log live and cancelling."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from multidict import CIMultiDict
from playwright.async_api import Browser, Locator, Page, expect

from tests.support.gateway_apps import Gateway, GatewayClient
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.stack import Stack, StackFactory
from tests.support.web_page import (
    WAIT,
    document_reads,
    open_page,
    shot,
    with_token,
)

# ---- HTTP ---------------------------------------------------------------------------------


async def fetch(
    gw: GatewayClient, path: str, **headers: str
) -> tuple[int, CIMultiDict[str], bytes]:
    async with gw.get(path, headers=headers) as resp:
        return resp.status, resp.headers.copy(), await resp.read()


async def test_page_and_assets(gateway: Gateway) -> None:
    s = await gateway()
    status, headers, body = await fetch(s, "/")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Cache-Control"] == "no-cache"
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    page = body.decode()
    # Every asset is the gateway's own, by a versioned root-relative URL: no CDN, no host.
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assets = [r for r in refs if r.startswith("/static/")]
    assert {r.split("?")[0] for r in assets} == {
        "/static/app.js",
        "/static/graph.js",
        "/static/timeline.js",
        "/static/style.css",
    }
    assert all(r.startswith(("/static/", "#", "data:")) for r in refs), refs
    # The page is revalidated: same ETag, 304.
    status, _, _ = await fetch(s, "/", **{"If-None-Match": headers["ETag"]})
    assert status == 304

    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
    for ref in assets:
        status, headers, body = await fetch(s, ref)
        assert status == 200, ref
        assert headers["Content-Type"] == types[Path(ref.split("?")[0]).suffix]
        assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert body
        # Without its version (or with another one) an asset is revalidated, not kept.
        for unversioned in (ref.split("?")[0], ref.split("?")[0] + "?v=old"):
            status, headers, again = await fetch(s, unversioned)
            assert (status, headers["Cache-Control"], again) == (200, "no-cache", body)
        status, _, _ = await fetch(s, ref, **{"If-None-Match": headers["ETag"]})
        assert status == 304

    for missing in ("/static/nope.js", "/static/index.html", "/static/..%2Fweb.py"):
        status, headers, body = await fetch(s, missing)
        assert status == 404, missing
        assert headers["Content-Type"].startswith("application/json")
        assert "error" in json.loads(body)


async def runs_list(s: Stack, query: str = "") -> dict[str, Any]:
    status, body = await s.request("GET", "/api/runs" + query)
    assert status == 200, body
    return body


async def test_runs_list(stack: StackFactory) -> None:
    s = await stack(runners=2)
    assert await runs_list(s) == {"runs": [], "total": 0, "matching": 0, "limit": 50}

    await s.wait_run(await s.submit({"runId": "r1", "steps": [{"id": "a", "command": "true"}]}))
    await s.wait_run(await s.submit({"runId": "r2", "steps": [{"id": "a", "command": "exit 1"}]}))
    named = {
        "name": "listed",
        "steps": [{"id": "a", "command": "true"}, {"id": "b", "command": "true"}],
    }
    assert (await s.request("POST", "/api/workflows", json=named))[0] == 201
    status, made = await s.request("POST", "/api/workflows/listed/runs")
    assert status == 201, made
    r3 = made["runId"]
    await s.wait_run(r3)
    await s.submit({"runId": "r4", "steps": [{"id": "a", "command": "sleep 30"}]})
    await s.wait_step("r4", "a", {"running"})

    body = await runs_list(s)
    assert [r["runId"] for r in body["runs"]] == ["r4", r3, "r2", "r1"]
    assert (body["total"], body["matching"], body["limit"]) == (4, 4, 50)
    by_id = {r["runId"]: r for r in body["runs"]}
    assert [by_id[r]["status"] for r in ("r1", "r2", r3, "r4")] == [
        "succeeded",
        "failed",
        "succeeded",
        "running",
    ]
    third = by_id[r3]
    assert (third["workflowName"], third["stepCount"], third["trigger"]) == ("listed", 2, "api")
    assert third["createdAt"] < third["finishedAt"]
    assert by_id["r1"]["counts"] is None and by_id["r1"]["workflowName"] is None
    assert by_id["r4"]["finishedAt"] is None
    # A registered workflow's runs have counts, from the history index that follows them.
    deadline = time.monotonic() + 30
    while (await runs_list(s, "?status=succeeded&limit=1"))["runs"][0]["counts"] != {
        "succeeded": 2
    }:
        assert time.monotonic() < deadline, await runs_list(s)
        await asyncio.sleep(0.05)

    assert [r["runId"] for r in (await runs_list(s, "?limit=2"))["runs"]] == ["r4", r3]
    for status, ids in {
        "running": ["r4"],
        "succeeded": [r3, "r1"],
        "failed": ["r2"],
        "cancelled": [],
    }.items():
        body = await runs_list(s, f"?status={status}")
        assert [r["runId"] for r in body["runs"]] == ids, status
        assert body["matching"] == len(ids) and body["total"] == 4
    assert [r["runId"] for r in (await runs_list(s, "?status=succeeded&limit=1"))["runs"]] == [r3]
    assert len((await runs_list(s, "?limit=1000"))["runs"]) == 4

    bad = {
        "?limit=0": ["limit"],
        "?limit=1001": ["limit"],
        "?limit=-1": ["limit"],
        "?limit=abc": ["limit"],
        "?limit=1.5": ["limit"],
        "?limit=": ["limit"],
        "?status=bogus": ["status"],
        "?status=pending": ["status"],  # a step state, not a run's
        "?status=": ["status"],
        "?limit=0&status=nope": ["limit", "status"],
    }
    for query, paths in bad.items():
        status, body = await s.request("GET", "/api/runs" + query)
        assert status == 400, query
        assert [p["path"] for p in body["problems"]] == paths, (query, body)
        for p in body["problems"]:
            assert p["message"].startswith(f"{p['path']} must be"), body
        assert body["error"] == "invalid " + " and ".join(paths)

    status, _ = await s.request("POST", "/api/runs/r4/cancel")
    assert status == 202


# ---- a real browser -----------------------------------------------------------------------


async def submit_in_page(page: Page, doc: dict[str, Any] | str) -> None:
    await page.locator("a[data-nav=submit]").click()
    await page.locator("#doc").fill(doc if isinstance(doc, str) else json.dumps(doc))
    await page.locator("#submit").click()


def log_line(page: Page, stream: str, text: str) -> Locator:
    return page.locator(f"#log .line-{stream} .text", has_text=text)


@pytest.mark.timeout(240)
async def test_browser_submit_watch_follow_and_runners(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    gate = tmp_path / "go"
    doc = {
        "name": "web-flow",
        "steps": [
            {"id": "hello", "command": "echo hello-from-the-page; echo '<b>not-bold</b>' >&2"},
            {
                "id": "gate",
                "command": f"echo waiting; while [ ! -e '{gate}' ]; do sleep 0.05; done; "
                "echo released",
                "dependsOn": ["hello"],
            },
        ],
    }
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/"), errors)
    await expect(page.locator("#runs-body")).to_contain_text("No runs yet", timeout=WAIT)

    await submit_in_page(page, doc)
    await page.wait_for_url(re.compile(r"#/runs/[A-Za-z0-9_-]+$"), timeout=WAIT)
    run_id = page.url.rsplit("/", 1)[1]
    await expect(page.locator('tr[data-step="hello"] .badge')).to_have_text(
        "succeeded", timeout=WAIT
    )
    await expect(page.locator("#run-status")).to_have_text("running")
    await expect(page.locator('#dag [data-node="gate"]')).to_have_count(1)
    await shot(page, "run")

    # The runs list shows it, and leads back to it.
    await page.locator("a[data-nav=runs]").click()
    row = page.locator(f'tr[data-run="{run_id}"]')
    await expect(row).to_contain_text("web-flow", timeout=WAIT)
    await expect(row.locator(".badge")).to_have_text("running")
    await shot(page, "runs")
    await row.locator("a").click()

    # The gate step's log, followed live: "released" is printed only once the page follows.
    await page.locator('tr[data-step="gate"] a.step-link').click()
    await expect(log_line(page, "stdout", "waiting")).to_have_count(1, timeout=WAIT)
    await expect(page.locator("#log-state")).to_have_text("Following live", timeout=WAIT)
    gate.touch()
    await expect(log_line(page, "stdout", "released")).to_have_count(1, timeout=WAIT)
    await expect(page.locator("#log-state")).to_contain_text("Step ended: succeeded", timeout=WAIT)
    await expect(page.locator("#step-status")).to_have_text("succeeded")
    await expect(page.locator('#log section[data-attempt="1"] .line-heddle').first).to_be_visible()

    # The run, then the first step's log: stdout, and stderr shown as text, not markup.
    await page.locator(".crumbs a", has_text=run_id).click()
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator("#steps-body .badge")).to_have_text(["succeeded", "succeeded"])
    await expect(page.locator("#cancel")).to_be_disabled()
    await page.locator('tr[data-step="hello"] a.step-link').click()
    await expect(log_line(page, "stdout", "hello-from-the-page")).to_have_count(1, timeout=WAIT)
    await expect(log_line(page, "stderr", "<b>not-bold</b>")).to_have_count(1)
    assert await page.locator("#log b").count() == 0
    await shot(page, "step-log")

    await page.locator("a[data-nav=runs]").click()
    await expect(row.locator(".badge")).to_have_text("succeeded", timeout=WAIT)

    await page.locator("a[data-nav=runners]").click()
    await expect(page.locator("#pool-total")).to_have_text("2", timeout=WAIT)
    await expect(page.locator("#runners-body tr[data-runner]")).to_have_count(2)
    for name in ("runner-0", "runner-1"):
        await expect(page.locator(f'tr[data-runner="{name}"] .badge')).to_have_text("idle")
    await shot(page, "runners-idle")
    assert errors == []


@pytest.mark.timeout(240)
async def test_browser_problems_and_cancel(stack: StackFactory, browser: Browser) -> None:
    s = await stack(runners=1, HEDDLE_MAX_BODY_BYTES="4000")
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/submit"), errors)

    bad = {
        "steps": [
            {"id": "a", "command": "true"},
            {"id": "a", "command": "true"},
            {"id": "b", "dependsOn": ["nope"]},
        ],
        "extra": 1,
    }
    status, answer = await s.request("POST", "/api/runs", json=bad)
    assert status == 400 and len(answer["problems"]) == 4, answer
    await submit_in_page(page, bad)
    items = page.locator("#submit-error #problems li")
    await expect(items).to_have_count(4, timeout=WAIT)
    await expect(items).to_have_text(
        [f"{p['path']} {p['message']}" for p in answer["problems"]], use_inner_text=True
    )
    await expect(page.locator("#submit-error")).to_contain_text("400")
    await shot(page, "submit-problems")

    await submit_in_page(page, {"steps": [{"id": "big", "command": "x" * 5000}]})
    await expect(page.locator("#submit-error")).to_contain_text("limit is 4000 bytes", timeout=WAIT)
    await expect(page.locator("#submit-error")).to_contain_text("413")

    await submit_in_page(page, {"steps": [{"id": "long", "command": "sleep 30"}]})
    await page.wait_for_url(re.compile(r"#/runs/[A-Za-z0-9_-]+$"), timeout=WAIT)
    await expect(page.locator('tr[data-step="long"] .badge')).to_have_text("running", timeout=WAIT)
    await page.locator("#cancel").click()
    await expect(page.locator("#cancel-outcome")).to_contain_text("(202)", timeout=WAIT)
    await expect(page.locator("#run-status")).to_have_text("cancelled", timeout=WAIT)
    await expect(page.locator('tr[data-step="long"] .badge')).to_have_text("cancelled")
    await expect(page.locator("#cancel")).to_be_disabled()
    assert errors == []


async def test_browser_run_page_shows_the_deadline_and_why_the_run_stopped(
    stack: StackFactory, browser: Browser
) -> None:
    """docs/workflows.md, "Run deadlines": the reason comes with the run's events."""
    s = await stack(runners=1)
    errors: list[str] = []
    page = await open_page(browser, with_token(s, "/#/submit"), errors)
    await submit_in_page(
        page, {"timeoutSeconds": 2, "steps": [{"id": "long", "command": "sleep 30"}]}
    )
    await page.wait_for_url(re.compile(r"#/runs/[A-Za-z0-9_-]+$"), timeout=WAIT)
    await expect(page.locator("#run-meta")).to_contain_text("Deadline", timeout=WAIT)
    await expect(page.locator("#run-meta")).to_contain_text("(2 s)")
    await expect(page.locator("#run-status")).to_have_text("failed", timeout=WAIT)
    await expect(page.locator("#run-reason")).to_have_text(
        "deadline: the run passed its timeoutSeconds (2 s)"
    )
    await expect(page.locator('tr[data-step="long"] .badge')).to_have_text("cancelled")
    assert errors == []


@pytest.mark.timeout(240)
async def test_browser_token_prompt_and_address(stack: StackFactory, browser: Browser) -> None:
    s = await stack(runners=1)
    await s.wait_run(await s.submit({"runId": "seen", "steps": [{"id": "a", "command": "true"}]}))
    errors: list[str] = []

    # Without a token the page asks for one (a password field) and shows no runs.
    page = await open_page(browser, s.base + "/", errors)
    await expect(page.locator("#token-form")).to_be_visible(timeout=WAIT)
    await expect(page.locator("#token-input")).to_have_attribute("type", "password")
    await shot(page, "token-prompt")
    assert await page.locator("#runs-body").count() == 0
    await page.locator("#token-input").fill(s.admin_token)
    await page.locator("#token-use").click()
    await expect(page.locator('tr[data-run="seen"]')).to_have_count(1, timeout=WAIT)

    # Opened with ?token=: the runs load, and the address bar no longer shows the token.
    page = await open_page(browser, with_token(s, "/#/runs"), errors)
    await expect(page.locator('tr[data-run="seen"]')).to_have_count(1, timeout=WAIT)
    assert page.url == s.base + "/#/runs", page.url
    await page.reload()  # kept for the tab
    await expect(page.locator('tr[data-run="seen"]')).to_have_count(1, timeout=WAIT)
    # Forgetting it brings the prompt back.
    await page.locator("#forget-token").click()
    await expect(page.locator("#token-form")).to_be_visible(timeout=WAIT)

    # A viewer reads, and is told what its role cannot do (403).
    status, made = await s.request("POST", "/api/tokens", json={"name": "web", "role": "viewer"})
    assert status == 201, made
    page = await open_page(browser, with_token(s, "/#/runs/seen", made["token"]), errors)
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    await submit_in_page(page, {"steps": [{"id": "a", "command": "true"}]})
    await expect(page.locator("#submit-error")).to_contain_text(
        "this needs the admin role; the token has viewer", timeout=WAIT
    )
    # A token that is not one: the prompt says so.
    page = await open_page(browser, with_token(s, "/", "hdl_not-a-real-token"), errors)
    await expect(page.locator("#token-why")).to_contain_text("unknown token", timeout=WAIT)
    assert errors == []


def wait_loop(path: str) -> str:
    return f"while [ ! -e '{path}' ]; do sleep 0.05; done"


@pytest.mark.timeout(240)
async def test_browser_run_page_follows_the_run_s_events(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    """The run page reads the run's document once at the start and once at the end; in between
    every state it shows comes from GET /api/runs/{run}/events, the run's turn included (one
    run under way at a time: the watched run waits while the blocker runs)."""
    s = await stack(runners=1, HEDDLE_MAX_RUNS_UNDER_WAY="1")
    hold, go = tmp_path / "hold", tmp_path / "go"
    await s.submit({"runId": "blocker", "steps": [{"id": "hold", "command": wait_loop(str(hold))}]})
    await s.wait_step("blocker", "hold", {"running"})
    steps = [
        {"id": "a", "command": wait_loop(str(go))},
        {"id": "b", "command": "true", "dependsOn": ["a"]},
    ]
    await s.submit({"runId": "watched", "steps": steps})
    assert (await s.run("watched"))["waiting"] is True  # the blocker is under way

    errors: list[str] = []
    page = await browser.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    reads = document_reads(page, "watched")
    streams: list[str] = []
    page.on(
        "request",
        lambda r: streams.append(r.url) if urlparse(r.url).path.endswith("/events") else None,
    )
    await page.goto(with_token(s, "/#/runs/watched"))
    badge_a = page.locator('tr[data-step="a"] .badge')
    node_a = page.locator('#dag [data-node="a"]')
    await expect(badge_a).to_have_text("pending", timeout=WAIT)
    await expect(page.locator("#run-live")).to_have_text("Following live", timeout=WAIT)
    await expect(page.locator("#waiting")).to_contain_text("Waiting for its turn")
    await expect(page.locator('tr[data-step="b"] .badge')).to_have_text("pending")
    await expect(node_a).to_have_class(re.compile(r"\bst-pending\b"))

    hold.touch()  # the blocker ends: the watched run's turn, and a is sent to the runner
    await expect(badge_a).to_have_text("running", timeout=WAIT)
    await expect(page.locator("#waiting")).to_have_count(0)
    await expect(node_a).to_have_class(re.compile(r"\bst-running\b"))
    await expect(page.locator('tr[data-step="a"] td').nth(3)).to_have_text("runner-0")
    await expect(page.locator("#run-meta")).to_contain_text("1 running")
    assert len(reads) == 1, reads

    go.touch()
    await expect(badge_a).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator('tr[data-step="b"] .badge')).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator('#dag [data-node="b"]')).to_have_class(
        re.compile(r"\bst-succeeded\b")
    )
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator("#run-meta")).to_contain_text("2 succeeded")
    await expect(page.locator("#cancel")).to_be_disabled()
    await expect(page.locator("#run-live")).to_have_text("")
    # The document read once more at the end (an exit code is in both), and no more after.
    await expect(page.locator('tr[data-step="a"] td').nth(4)).to_have_text("0")
    deadline = time.monotonic() + 10
    while len(reads) < 2:
        assert time.monotonic() < deadline, reads
        await asyncio.sleep(0.05)
    await asyncio.sleep(2)
    assert len(reads) == 2, reads
    assert len(streams) == 1, streams
    assert errors == []


@pytest.mark.timeout(240)
async def test_browser_run_page_reads_the_run_while_its_stream_is_cut(
    stack: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    """The gateway killed under a followed run: the page says so, reads the run document
    while it is away, follows the stream again once it is back, and misses no state."""
    s = await stack(runners=1)
    first, second = tmp_path / "first", tmp_path / "second"
    steps = [
        {"id": "a", "command": wait_loop(str(first))},
        {"id": "b", "command": wait_loop(str(second)), "dependsOn": ["a"]},
    ]
    await s.submit({"runId": "cut", "steps": steps})
    await s.wait_step("cut", "a", {"running"})
    errors: list[str] = []
    page = await browser.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    reads = document_reads(page, "cut")
    await page.goto(with_token(s, "/#/runs/cut"))
    live = page.locator("#run-live")
    await expect(live).to_have_text("Following live", timeout=WAIT)
    await expect(page.locator('tr[data-step="a"] .badge')).to_have_text("running")

    s.kill("gateway")
    await expect(live).to_contain_text("reading the run every", timeout=WAIT)
    await expect(live).to_contain_text("reconnecting")
    first.touch()  # a ends while the page cannot hear of it
    s.start("gateway")
    await expect(page.locator('tr[data-step="a"] .badge')).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator('tr[data-step="b"] .badge')).to_have_text("running", timeout=WAIT)
    await expect(live).to_have_text("Following live", timeout=WAIT)
    read_while_cut = len(reads)
    assert read_while_cut >= 2, reads  # at the start, then while the stream was away

    second.touch()
    await expect(page.locator("#run-status")).to_have_text("succeeded", timeout=WAIT)
    await expect(page.locator('tr[data-step="b"] .badge')).to_have_text("succeeded")
    await expect(page.locator('#dag [data-node="b"]')).to_have_class(
        re.compile(r"\bst-succeeded\b")
    )
    await expect(live).to_have_text("")
    assert errors == []
