"""A data dir written by the release before namespaces (tests/fixtures/before-namespaces.tar.gz,
made by tests/fixtures/make_data_dir.py with that release installed), started with this code:
every old run, workflow, schedule, semaphore and token is the `default` namespace's, and they
still work."""

from __future__ import annotations

import asyncio
import json
import signal
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.up import start_up, wait_http

FIXTURE = Path(__file__).parents[1] / "fixtures" / "before-namespaces.tar.gz"
OLD_RUNS = {"hello-1": "succeeded", "broken-1": "failed"}


async def get(http: aiohttp.ClientSession, url: str, token: str) -> Any:
    async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
        assert resp.status == 200, (url, resp.status, await resp.text())
        return await resp.json()


async def post(http: aiohttp.ClientSession, url: str, token: str) -> tuple[int, Any]:
    async with http.post(url, json={}, headers={"Authorization": f"Bearer {token}"}) as resp:
        return resp.status, await resp.json()


async def ended(http: aiohttp.ClientSession, url: str, token: str) -> dict[str, Any]:
    for _ in range(600):
        run = await get(http, url, token)
        if run["status"] not in ("queued", "running"):
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} did not end")


async def scheduled_run(
    http: aiohttp.ClientSession, base: str, token: str, since: datetime
) -> dict[str, Any]:
    """The first run the old schedule starts under this code: its slot is overdue at once.
    It is told by its slot, after ``since``; the fixture's own are hours older."""
    for _ in range(300):
        history = await get(http, f"{base}/api/workflows/etl/runs?limit=20", token)
        fired = [
            r
            for r in history["runs"]
            if r.get("scheduledFor") and datetime.fromisoformat(r["scheduledFor"]) > since
        ]
        if fired:
            return fired[0]
        await asyncio.sleep(0.1)
    raise AssertionError("the old schedule fired no run")


async def test_a_data_dir_from_before_namespaces_is_defaults_and_still_works(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(data, filter="data")
    tokens = json.loads((data / "fixture-tokens.json").read_text())
    # The schedule's first slot under this code is the last one before its start.
    since = datetime.now(UTC) - timedelta(minutes=2)
    up = start_up(tmp_path, data, runners=2)
    checked = False
    try:
        base = f"http://127.0.0.1:{up.port}"
        await wait_http(f"{base}/api/runners", data / "admin-token", runners=2, timeout=60)
        async with aiohttp.ClientSession() as http:
            await _check_old_objects(http, base, tokens)
            await _check_they_still_work(http, base, tokens, since)
        checked = True
    finally:
        up.proc.send_signal(signal.SIGTERM)
        out, _ = up.proc.communicate(timeout=60)
        if not checked:
            print(out.decode()[-8000:])  # what heddle up said, shown with the failure
    assert up.proc.returncode == 0, out.decode()[-3000:]


async def _check_old_objects(
    http: aiohttp.ClientSession, base: str, tokens: dict[str, str]
) -> None:
    """Every run, workflow, semaphore and token the fixture holds, as default's."""
    admin = tokens["admin"]
    listed = await get(http, f"{base}/api/runs?limit=100", admin)
    old = {r["runId"] for r in listed["runs"]}
    assert set(OLD_RUNS) <= old
    assert {r["namespace"] for r in listed["runs"]} == {"default"}
    for run_id, status in OLD_RUNS.items():
        run = await get(http, f"{base}/api/runs/{run_id}?namespace=default", admin)
        assert (run["status"], run["namespace"]) == (status, "default")
    step = await get(http, f"{base}/api/runs/hello-1/steps/greet", admin)
    assert "hello from the older release" in json.dumps(step)
    workflows = await get(http, f"{base}/api/workflows", admin)
    (etl,) = [w for w in workflows["workflows"] if w["name"] == "etl"]
    assert (etl["namespace"], etl["schedule"]) == ("default", "* * * * *")
    semaphore = await get(http, f"{base}/api/semaphores/gpu", admin)
    assert (semaphore["size"], semaphore.get("namespace", "default")) == (2, "default")
    listed_tokens = await get(http, f"{base}/api/tokens", admin)
    (ci,) = [t for t in listed_tokens["tokens"] if t["name"] == "ci"]
    assert ci["namespaces"] == {"default": "operator"}


async def _check_they_still_work(
    http: aiohttp.ClientSession, base: str, tokens: dict[str, str], since: datetime
) -> None:
    ci = tokens["ci"]  # the old operator token, in default alone
    status, answer = await post(http, f"{base}/api/workflows/etl/runs", ci)
    assert status == 201, answer
    run = await ended(http, f"{base}/api/runs/{answer['runId']}", ci)
    assert (run["status"], run["namespace"]) == ("succeeded", "default")
    status, answer = await post(http, f"{base}/api/runs/broken-1/retry", ci)
    assert status in (200, 201), answer
    retried = await ended(http, f"{base}/api/runs/{answer['runId']}", ci)
    assert {s["id"]: s["status"] for s in retried["steps"]}["first"] == "succeeded"
    fired = await scheduled_run(http, base, ci, since)
    assert (await ended(http, f"{base}/api/runs/{fired['runId']}", ci))["status"] == "succeeded"
