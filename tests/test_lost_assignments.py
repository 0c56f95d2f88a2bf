"""The backstop for a queued attempt nobody holds (services/orchestrator/backstop.py), with
real processes. A broker killed at the wrong moment can keep a consumer's acknowledgement
of a ready message while losing the heartbeat and events written around it; here the same
state is made on purpose: the ready message is taken and acknowledged while no runner
ever sees it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from services.dispatcher.app import ready_consumer
from shared import names
from shared.resources import ensure_consumer
from tests.conftest import StackFactory
from tests.stack import step_of

pytestmark = pytest.mark.fault


async def take_ready_message(nats_url: str, run_id: str, step_id: str) -> None:
    """Consume and acknowledge the step's ready message as a dispatcher would once a
    runner accepted it."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_consumer(js, names.STEPS_STREAM, ready_consumer())
        sub = await js.pull_subscribe_bind(names.DISPATCHER_DURABLE, names.STEPS_STREAM)
        [msg] = await sub.fetch(1, timeout=10)
        assert msg.subject == names.step_ready(run_id, step_id)
        await msg.ack_sync()
    finally:
        await nc.close()


async def test_a_queued_step_whose_assignment_was_lost_runs_once_and_the_run_ends(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1, services=("orchestrator", "gateway"))
    ran = tmp_path / "ran"
    run_id = await s.submit(
        {
            "steps": [
                {"id": "work", "command": f"echo once >> {ran}"},
                {"id": "after", "command": "true", "dependsOn": ["work"]},
            ]
        }
    )
    await s.wait_step(run_id, "work", {"queued"})
    await take_ready_message(s.nats_url, run_id, "work")
    s.start("dispatcher")
    run = await s.wait_run(run_id, timeout=20)
    work = step_of(run, "work")
    assert run["status"] == "succeeded"
    assert (work["attempt"], work.get("requeues")) == (1, 1)
    assert ran.read_text() == "once\n"
    status, body = await s.request("GET", f"/api/runs/{run_id}/steps/work/logs")
    assert status == 200
    notes = [x["text"] for x in body["lines"] if x["stream"] == "heddle"]
    assert any("queued again: no runner holds attempt 1" in n for n in notes), notes
    assert '"msg":"step requeued"' in s.logs("orchestrator")


async def test_a_step_waiting_for_a_busy_pool_is_left_alone(stack: StackFactory) -> None:
    """Queued for many backstop periods (0.6 s each here) behind a busy runner: its ready
    message is in the stream the whole time, so it is never queued again."""
    s = await stack(runners=1)
    run_id = await s.submit(
        {
            "steps": [
                {"id": "one", "command": "sleep 2"},
                {"id": "two", "command": "sleep 2"},
            ]
        }
    )
    await asyncio.sleep(0.5)
    run = await s.run(run_id)
    assert {step_of(run, "one")["status"], step_of(run, "two")["status"]} == {
        "running",
        "queued",
    }
    run = await s.wait_run(run_id, timeout=20)
    assert run["status"] == "succeeded"
    assert [step_of(run, x).get("requeues", 0) for x in ("one", "two")] == [0, 0]
    assert "step requeued" not in s.logs("orchestrator")
