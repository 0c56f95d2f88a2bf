"""GET /api/runs/{run}/events: a run's changes as server-sent events, ending with the run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import nats
from heddle.services.gateway.handlers.run_events import RunChanges
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.buckets import open_bucket
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, StepRecord
from yarl import URL

from tests.support.gateway_apps import Gateway, bearer, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.run_events import Events, events, parse, records
from tests.support.stack import StackFactory

FLOW = {
    "steps": [
        {"id": "a", "command": "sleep 0.3"},
        {"id": "b", "command": "exit 3", "dependsOn": ["a"], "retries": 1},
        {"id": "c", "command": "true", "dependsOn": ["b"]},
    ]
}


def last_states(got: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    return {data["stepId"]: data["status"] for kind, data in got if kind == "step"}


async def test_a_run_is_followed_to_its_end_and_the_stream_ends(stack: StackFactory) -> None:
    s = await stack(runners=2)
    run_id = await s.submit(FLOW)
    got = await events(s, run_id)
    kinds = [kind for kind, _ in got]
    assert kinds[0] == "run" and kinds[-1] == "end", kinds
    assert kinds.count("end") == 1
    end = got[-1][1]
    assert (end["runId"], end["status"]) == (run_id, "failed")
    assert end["counts"] == {"succeeded": 1, "failed": 1, "skipped": 1}
    assert last_states(got) == {"a": "succeeded", "b": "failed", "c": "skipped"}
    # b's retry shows as its own change: attempt 2 after attempt 1.
    b_attempts = [d["attempt"] for k, d in got if k == "step" and d["stepId"] == "b"]
    assert max(b_attempts) == 2 and b_attempts == sorted(b_attempts), got
    assert (await s.run(run_id))["status"] == "failed"  # what the stream said is stored

    # A finished run: its state at once, then the end.
    again = await events(s, run_id, within=5)
    assert [k for k, _ in again][-1] == "end" and last_states(again) == last_states(got)

    status, body = await s.request("GET", "/api/runs/nope/events")
    assert status == 404 and "nope" in body["error"]


async def test_a_client_waiting_for_the_end_is_told_only_the_run(stack: StackFactory) -> None:
    """``?steps=none``: the run's changes and the end with its counts, no step at all."""
    s = await stack(runners=2)
    run_id = await s.submit(FLOW)
    both = await asyncio.gather(events(s, run_id, query="?steps=none"), events(s, run_id))
    waiting, following = both
    assert {k for k, _ in waiting} == {"run", "end"}, waiting
    assert [k for k, _ in waiting].count("run") >= 1 and waiting[-1][0] == "end"
    assert waiting[-1][1] == following[-1][1]  # the same end, counts and all
    assert waiting[-1][1]["counts"] == {"succeeded": 1, "failed": 1, "skipped": 1}
    assert any(k == "step" for k, _ in following)

    status, body = await s.request("GET", f"/api/runs/{run_id}/events?steps=some")
    assert status == 400 and body["problems"][0]["path"] == "steps", body
    assert "'some'" in body["problems"][0]["message"]


async def test_a_cancelled_run_ends_its_stream(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit({"steps": [{"id": "slow", "command": "sleep 30"}]})
    await s.wait_step(run_id, "slow", {"running"})
    follow = asyncio.create_task(events(s, run_id))
    await asyncio.sleep(0.2)
    assert (await s.request("POST", f"/api/runs/{run_id}/cancel"))[0] == 202
    got = await follow
    assert got[-1] == ("end", got[-1][1]) and got[-1][1]["status"] == "cancelled"
    assert any(k == "run" and d["cancelRequested"] for k, d in got), got


def test_each_state_is_told_once() -> None:
    told = RunChanges()
    step = StepRecord(id="a", command="true", status="queued", attempt=1)
    assert told.step(step).startswith(b"event: step\n")
    assert told.step(step) == b""  # the same record again (a watch and a read): no news
    assert told.step(StepRecord(id="a", command="true", status="running", attempt=1))
    assert told.step(StepRecord(id="a", command="true", status="running", attempt=2))
    run = RunRecord(run_id="r", status="running", created_at="t", step_count=1)
    assert told.run_changed(run) and told.run_changed(run) == b""
    cancelling = RunRecord(
        run_id="r", status="running", created_at="t", step_count=1, cancel_requested=True
    )
    assert b'"cancelRequested":true' in told.run_changed(cancelling)
    past = RunRecord(
        run_id="r", status="running", created_at="t", step_count=1, reason="deadline: ..."
    )
    told = RunChanges()
    assert told.run_changed(run) and b'"reason":"deadline: ..."' in told.run_changed(past)


def test_a_record_that_came_no_further_is_not_news() -> None:
    """A live put and the opening read cross: the older of the two is not told, unless it is
    the stored state at the end (a put the stream refused was seen live)."""
    told = RunChanges()
    running = StepRecord(id="a", command="true", status="running", attempt=1)
    queued = StepRecord(id="a", command="true", status="queued", attempt=1)
    assert told.step(running)
    assert told.step(queued) == b""  # older: the snapshot read after the live put
    assert told.step(StepRecord(id="a", command="true", status="queued", attempt=1, requeues=1))
    assert told.step(StepRecord(id="a", command="true", status="succeeded", attempt=1, requeues=1))
    assert told.step(running, stored=True).startswith(b"event: step\n")  # what is stored
    run = RunRecord(run_id="r", status="succeeded", created_at="t", step_count=1)
    assert told.run_changed(run)
    assert (
        told.run_changed(RunRecord(run_id="r", status="running", created_at="t", step_count=1))
        == b""
    )


async def read_events(
    session: aiohttp.ClientSession, url: URL, token: str, opened: list[str]
) -> Events:
    """Every event of the stream; the run joins ``opened`` at its first step event (by then
    the gateway has subscribed to the run's keys and read its steps)."""

    def note(got: Events) -> None:
        if len(got) == 2 and got[1][0] == "step":
            opened.append(url.path)

    async with session.get(url, headers=bearer(token)) as resp:
        return await parse(resp, 30, note)


async def test_many_followed_runs_cost_the_server_no_consumer(
    nats_server: EmbeddedNats, gateway: Gateway, admin_file: Path
) -> None:
    """300 runs followed at once: each stream tells its run's steps and ends with it, and no
    consumer is left on heddle-runs, while they are open or after (a KV watch per stream
    piled up ephemeral consumers until the server refused more)."""
    client = await gateway()
    nc = await nats.connect(nats_server.url)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    try:
        runs = await open_bucket(nc, nc.jetstream(), names.RUNS_BUCKET)
        stream = names.kv_stream(names.RUNS_BUCKET)

        async def write(run_id: str, step: str, run: str) -> None:
            for key, value in records(run_id, step, run).items():
                await runs.put(key, value)

        ids = [f"followed-{i}" for i in range(300)]
        token = root(admin_file)
        await asyncio.gather(*(write(r, "queued", "running") for r in ids))
        consumers = (await nc.jetstream().stream_info(stream)).state.consumer_count  # the index's
        opened: list[str] = []
        follows = [
            asyncio.create_task(
                read_events(session, client.make_url(f"/api/runs/{r}/events"), token, opened)
            )
            for r in ids
        ]
        async with asyncio.timeout(30):
            while len(opened) < len(ids):  # noqa: ASYNC110 (the streams' first events)
                await asyncio.sleep(0.05)
        assert (await nc.jetstream().stream_info(stream)).state.consumer_count == consumers
        await asyncio.gather(*(write(r, "running", "running") for r in ids))
        await asyncio.gather(*(write(r, "succeeded", "succeeded") for r in ids))
        for run_id, got in zip(ids, await asyncio.gather(*follows), strict=True):
            states = [d["status"] for kind, d in got if kind == "step"]
            assert states[0] == "queued" and states[-1] == "succeeded", (run_id, got)
            assert states == sorted(states, key=["queued", "running", "succeeded"].index)
            assert got[-1][0] == "end" and got[-1][1]["counts"] == {"succeeded": 1}, got
        assert (await nc.jetstream().stream_info(stream)).state.consumer_count == consumers
    finally:
        await session.close()
        await nc.close()
