"""GET /api/runs/{run}/events: a run's changes as server-sent events, ending with the run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from services.gateway.run_events import RunChanges
from shared.contracts import RunRecord, StepRecord
from tests.conftest import StackFactory
from tests.stack import Stack

FLOW = {
    "steps": [
        {"id": "a", "command": "sleep 0.3"},
        {"id": "b", "command": "exit 3", "dependsOn": ["a"], "retries": 1},
        {"id": "c", "command": "true", "dependsOn": ["b"]},
    ]
}


async def events(s: Stack, run_id: str, within: float = 30.0) -> list[tuple[str, dict[str, Any]]]:
    """Every event of the stream, read until the server ends it."""
    session = await s.http()
    got: list[tuple[str, dict[str, Any]]] = []
    async with session.get(f"{s.base}/api/runs/{run_id}/events") as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        kind = ""
        async with asyncio.timeout(within):  # the stream must end by itself
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[len("event: ") :]
                elif line.startswith("data: "):
                    got.append((kind, json.loads(line[len("data: ") :])))
    return got


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
