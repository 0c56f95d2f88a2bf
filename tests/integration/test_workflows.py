"""Registered workflows through the real stack: versions, triggers, history, pausing, the
errors, and retention."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nats
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.orchestrator.retention import Retention
from heddle.shared.broker.buckets import Bucket, open_bucket
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunSummary, encode
from nats.js import JetStreamContext

from tests.support.gateway_apps import Gateway, GatewayClient, call, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.stack import TERMINAL_RUN, Stack, StackFactory, eventually

V1 = {"name": "etl", "steps": [{"id": "A", "command": "echo one"}]}
V2 = {
    "name": "etl",
    "description": "two steps",
    "steps": [
        {"id": "A", "command": "echo two"},
        {"id": "B", "command": "echo three", "dependsOn": ["A"]},
    ],
}
# V2 again, written differently: key order, explicit defaults.
V2_AGAIN = {
    "steps": [
        {"command": "echo two", "id": "A", "retries": 0, "dependsOn": []},
        {"dependsOn": ["A"], "id": "B", "command": "echo three"},
    ],
    "catchup": True,
    "description": "two steps",
    "name": "etl",
}


class GatewayApp:
    """A gateway app over a real NATS, asked as ``Stack.request`` asks a whole stack: for
    what the gateway answers alone (workflows are registered, paused and read there)."""

    def __init__(self, client: GatewayClient, token: str) -> None:
        self.client, self.token = client, token

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await call(self.client, method, path, self.token, **kwargs)


async def register(s: Stack | GatewayApp, doc: dict[str, Any], expect: int = 201) -> int:
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == expect, body
    return body["version"]


async def trigger(s: Stack, name: str, query: str = "", expect: int = 201, **kw: Any) -> str:
    status, body = await s.request("POST", f"/api/workflows/{name}/runs{query}", **kw)
    assert status == expect, body
    return body["runId"]


async def history(s: Stack, name: str, n: int, query: str = "") -> list[dict[str, Any]]:
    """The history once it lists ``n`` runs, all finished (it is written asynchronously)."""
    deadline = time.monotonic() + 15
    while True:
        status, body = await s.request("GET", f"/api/workflows/{name}/runs{query}")
        assert status == 200, body
        runs = body["runs"]
        if len(runs) == n and all(r["status"] in TERMINAL_RUN for r in runs):
            return runs
        assert time.monotonic() < deadline, runs
        await asyncio.sleep(0.05)


async def test_versions_triggers_and_history(stack: StackFactory) -> None:
    s = await stack(runners=2)
    assert await register(s, V1) == 1
    assert await register(s, V2) == 2
    assert await register(s, V2_AGAIN, expect=200) == 2  # identical: no new version
    status, latest = await s.request("GET", "/api/workflows/etl")
    assert (status, latest["version"], latest["stepCount"]) == (200, 2, 2)
    assert latest["edges"] == [{"from": "A", "to": "B"}]
    status, old = await s.request("GET", "/api/workflows/etl?version=1")
    assert (old["version"], old["latestVersion"]) == (1, 2)
    assert old["steps"] == [{"id": "A", "command": "echo one"}]

    # A run of version 1 runs version 1's steps, though version 2 is the latest.
    r1 = await trigger(s, "etl", "?version=1")
    run = await s.wait_run(r1)
    assert (run["version"], run["workflowName"], run["trigger"]) == (1, "etl", "api")
    assert [(st["id"], st["stdoutTail"]) for st in run["steps"]] == [("A", "one")]
    r2 = await trigger(s, "etl")
    assert [st["stdoutTail"] for st in (await s.wait_run(r2))["steps"]] == ["two", "three"]
    # An idempotency key makes a repeat the same run, by header or by body.
    r3 = await trigger(s, "etl", headers={"Idempotency-Key": "nightly-42"})
    assert await trigger(s, "etl", expect=200, json={"idempotencyKey": "nightly-42"}) == r3
    await s.wait_run(r3)

    runs = await history(s, "etl", 3)
    assert [r["runId"] for r in runs] == [r3, r2, r1]  # newest first, across versions
    assert [r["version"] for r in runs] == [2, 2, 1]
    assert [r["counts"] for r in runs] == [{"succeeded": 2}, {"succeeded": 2}, {"succeeded": 1}]
    assert all(r["trigger"] == "api" and r["scheduledFor"] is None for r in runs)
    assert runs[0]["createdAt"] >= runs[1]["createdAt"] >= runs[2]["createdAt"]
    assert all(r["finishedAt"] >= r["createdAt"] for r in runs)
    assert [r["runId"] for r in await history(s, "etl", 2, "?limit=2")] == [r3, r2]

    status, body = await s.request("GET", "/api/workflows")
    [wf] = body["workflows"]
    assert (wf["name"], wf["version"], wf["stepCount"], wf["paused"]) == ("etl", 2, 2, False)
    assert wf["lastRun"]["runId"] == r3 and wf["lastRun"]["status"] == "succeeded"


async def test_pause_and_every_error_is_clear(gateway: Gateway, admin_file: Path) -> None:
    s = GatewayApp(await gateway(), root(admin_file))
    bad = {
        "name": "nightly",
        "schedule": "61 * * * *",
        "timezone": "Mars/Olympus",
        "steps": [{"id": "x", "command": "true"}, {"id": "x", "command": "true"}],
    }
    status, body = await s.request("POST", "/api/workflows", json=bad)
    assert status == 400
    paths = {p["path"] for p in body["problems"]}
    assert {"schedule", "timezone"} <= paths and len(paths) >= 3, body
    assert any("Mars/Olympus" in p["message"] for p in body["problems"])
    status, body = await s.request("POST", "/api/workflows", json={"steps": []})
    assert status == 400 and {p["path"] for p in body["problems"]} == {"name", "steps"}

    for method, path in [
        ("GET", "/api/workflows/nope"),
        ("GET", "/api/workflows/nope/runs"),
        ("POST", "/api/workflows/nope/runs"),
        ("PATCH", "/api/workflows/nope"),
    ]:
        kw = {"json": {"paused": True}} if method == "PATCH" else {}
        status, body = await s.request(method, path, **kw)
        assert status == 404 and "nope" in body["error"], (method, path, body)
    status, body = await s.request("GET", "/api/workflows/bad.name")
    assert status == 400

    doc = {
        "name": "nightly",
        "schedule": "0 6 * * *",
        "timezone": "Europe/Paris",
        "steps": [{"id": "x", "command": "true"}],
    }
    assert await register(s, doc) == 1
    for limit in ("0", "1001", "ten", "-1", "2.5"):
        status, body = await s.request("GET", f"/api/workflows/nightly/runs?limit={limit}")
        assert status == 400 and "limit" in body["problems"][0]["message"], (limit, body)
    status, body = await s.request("GET", "/api/workflows/nightly/runs?limit=1000")
    assert (status, body["runs"]) == (200, [])
    status, body = await s.request("GET", "/api/workflows/nightly?version=2")
    assert status == 404 and "version 2" in body["error"]
    status, _ = await s.request("POST", "/api/workflows/nightly/runs?version=7")
    assert status == 404

    for patch in ({"paused": "yes"}, {"paused": True, "schedule": "* * * * *"}, {}):
        status, body = await s.request("PATCH", "/api/workflows/nightly", json=patch)
        assert status == 400, (patch, body)
    status, body = await s.request("PATCH", "/api/workflows/nightly", json={"paused": True})
    assert (status, body["paused"]) == (200, True)
    status, body = await s.request("GET", "/api/workflows")
    [wf] = body["workflows"]
    assert (wf["paused"], wf["schedule"], wf["timezone"], wf["lastRun"]) == (
        True,
        "0 6 * * *",
        "Europe/Paris",
        None,
    )
    assert await register(s, {**doc, "description": "v2"}) == 2  # a new version stays paused
    status, body = await s.request("PATCH", "/api/workflows/nightly", json={"paused": False})
    assert (status, body["paused"], body["version"]) == (200, False, 2)


async def test_history_of_thousands_of_runs_reads_only_their_summaries(
    gateway: Gateway, admin_file: Path, nats_server: EmbeddedNats
) -> None:
    s = GatewayApp(await gateway(), root(admin_file))
    await register(s, {"name": "big", "steps": [{"id": "s", "command": "true"}]})
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    futures = []
    for i in range(3000):
        run = f"big-{i:05d}"
        summary = RunSummary(
            run_id=run,
            workflow_name="big",
            status="succeeded",
            created_at=f"2024-01-01T00:00:00.{i % 1000:03d}Z"
            if i < 1000
            else f"2024-01-02T{i // 1000:02d}:00:00.{i % 1000:03d}Z",
            step_count=1000,
            counts={"succeeded": 1000},
            version=1,
        )
        subject = names.kv_subject(names.RUNS_BUCKET, names.hist_key("big", run))
        futures.append(await js.publish_async(subject, encode(summary)))
    await asyncio.gather(*futures)
    status, body = await s.request("GET", "/api/workflows/big/runs?limit=1000")
    await nc.close()
    assert status == 200 and len(body["runs"]) == 1000
    assert [r["runId"] for r in body["runs"][:2]] == ["big-02999", "big-02998"]
    assert body["runs"][-1]["runId"] == "big-02000"


async def test_history_by_state_pages_past_the_runs_in_other_states(
    gateway: Gateway, admin_file: Path, nats_server: EmbeddedNats
) -> None:
    """One failed run behind newer successes: ``status=failed`` finds it on the first page,
    where a page filtered afterwards (as the command line once did) held none."""
    s = GatewayApp(await gateway(), root(admin_file))
    await register(s, {"name": "wff", "steps": [{"id": "s", "command": "true"}]})
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    for i, status in enumerate(["failed", "succeeded", "succeeded", "failed", "succeeded"]):
        summary = RunSummary(
            run_id=f"wff-{i}",
            workflow_name="wff",
            status=status,
            created_at=f"2024-01-01T00:00:0{i}.000Z",
            step_count=1,
            counts={status: 1},
            version=1,
        )
        await js.publish(
            names.kv_subject(names.RUNS_BUCKET, names.hist_key("wff", f"wff-{i}")), encode(summary)
        )
    await nc.close()
    status, body = await s.request("GET", "/api/workflows/wff/runs?status=failed&limit=1")
    assert status == 200 and [r["runId"] for r in body["runs"]] == ["wff-3"]
    _, older = await s.request(
        "GET", f"/api/workflows/wff/runs?status=failed&before={body['next']}"
    )
    assert ([r["runId"] for r in older["runs"]], older["next"]) == (["wff-0"], None)
    status, body = await s.request("GET", "/api/workflows/wff/runs?status=nope")
    assert status == 400 and body["problems"][0]["path"] == "status"


async def stored(js: JetStreamContext, stream: str, subjects: str) -> int:
    info = await js.stream_info(stream, subjects_filter=subjects)
    return sum((info.state.subjects or {}).values())


async def leftovers(js: JetStreamContext, kv: Bucket, run: str) -> dict[str, int]:
    """What a run left behind in each place retention must clean."""
    return {
        # A deleted run's record is a purge marker, which its followers see, for a while.
        "run": len(await read_current(kv, f"run.{run}")),
        "steps": await stored(js, "KV_heddle-runs", f"$KV.heddle-runs.step.{run}.*"),
        "hist": await stored(js, "KV_heddle-runs", f"$KV.heddle-runs.hist.*.{run}"),
        "heartbeats": await stored(js, "KV_heddle-heartbeats", f"$KV.heddle-heartbeats.{run}.>"),
        "logs": await stored(js, names.LOGS_STREAM, f"heddle.log.{run}.>"),
        "events": await stored(js, names.EVENTS_STREAM, f"heddle.evt.{run}.>"),
        "commands": await stored(js, names.CMD_STREAM, f"heddle.cmd.*.{run}.>"),
    }


async def test_retention_deletes_what_it_should_and_nothing_else(stack: StackFactory) -> None:
    s = await stack(runners=2, HEDDLE_RETENTION_RUNS="2", HEDDLE_RETENTION_INTERVAL="0.2")
    await register(s, {"name": "keep", "steps": [{"id": "slow", "command": "sleep 30"}]})
    await register(s, {"name": "keep", "steps": [{"id": "a", "command": "echo a; sleep 0.3"}]})
    # Every step outlives the report delay, so each run has a heartbeat to delete or keep.
    await register(s, {"name": "other", "steps": [{"id": "o", "command": "echo o; sleep 0.3"}]})
    live = await trigger(s, "keep", "?version=1")  # oldest, and still running: never deleted
    await s.wait_step(live, "slow", {"running"})
    quick: list[str] = []
    for _ in range(4):  # one at a time: retention may delete a run as soon as two are newer
        quick.append(await trigger(s, "keep"))
        await s.wait_run(quick[-1])
    other = await trigger(s, "other")
    # An inline run may carry a registered workflow's name; it stays out of that history.
    inline = await s.submit(
        {"name": "keep", "steps": [{"id": "i", "command": "echo i; sleep 0.3"}]}
    )
    await s.wait_run(other)
    await s.wait_run(inline)

    deadline = time.monotonic() + 15
    while True:
        _, body = await s.request("GET", "/api/workflows/keep/runs")
        if [r["runId"] for r in body["runs"]] == [quick[3], quick[2], live]:
            break
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.1)
    _, body = await s.request("GET", "/api/workflows")
    assert {w["name"]: w["lastRun"]["runId"] for w in body["workflows"]}["keep"] == quick[3]
    nc = await s.connect()
    js = nc.jetstream()
    kv = await open_bucket(nc, js, names.RUNS_BUCKET)
    try:
        # The runs list (the gateway's index) drops a deleted run too.
        _, listed = await s.request("GET", "/api/runs?limit=100")
        assert not {r["runId"] for r in listed["runs"]} & set(quick[:2]), listed
        for run in quick[:2]:
            assert (await s.request("GET", f"/api/runs/{run}"))[0] == 404
            assert set((await leftovers(js, kv, run)).values()) == {0}, run
        for run in (*quick[2:], other, inline):
            assert (await s.run(run))["status"] == "succeeded"
            left = await leftovers(js, kv, run)
            assert left["run"] == 1 and left["steps"] == 1 and left["logs"] > 0, (run, left)
            assert left["events"] > 0 and left["commands"] > 0, (run, left)
            assert left["heartbeats"] == 1 and left["hist"] == (run != inline)
        assert (await s.run(live))["status"] == "running"

        # The age rule, with the clock two hours on: every finished run goes, named or not;
        # the live one stays, and becomes the workflow's last run.
        aged = Retention(js, kv, keep_runs=0, keep_age=3600, interval=1, marker_ttl=3)
        swept = await aged.sweep(now=time.time() + 7200)
        assert set(swept.deleted) == {*quick[2:], other, inline}
        # Each deleted run's record is a purge marker, which followers of run.* see (the
        # gateway's run index), until the server removes it after its TTL.
        markers = [f"$KV.heddle-runs.run.{run}" for run in swept.deleted]
        assert [await stored(js, "KV_heddle-runs", m) for m in markers] == [1] * len(markers)
        for run in swept.deleted:
            assert set((await leftovers(js, kv, run)).values()) == {0}, run

        async def markers_expired() -> bool:
            return all([await stored(js, "KV_heddle-runs", m) == 0 for m in markers])

        await eventually(markers_expired, "the purge markers removed after their TTL")
        _, listed = await s.request("GET", "/api/runs?limit=100")
        assert [r["runId"] for r in listed["runs"]] == [live], listed
        assert (await s.run(live))["status"] == "running"
        _, body = await s.request("GET", "/api/workflows")
        last = {w["name"]: w["lastRun"] for w in body["workflows"]}
        assert last == {
            "keep": {"runId": live, "status": "running", "createdAt": last["keep"]["createdAt"]},
            "other": None,
        }
        assert len(await read_current(kv, "hist.*.*")) == 1
    finally:
        await nc.close()
    await s.request("POST", f"/api/runs/{live}/cancel")
