"""The backstop for a queued attempt nobody holds (services/orchestrator/backstop.py), with
real processes. A broker killed at the wrong moment can keep a consumer's acknowledgement
of a ready message while losing the heartbeat and events written around it; here the same
state is made on purpose: the ready message is taken and acknowledged while no runner
ever sees it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from heddle.services.dispatcher.ready import ready_consumer
from heddle.shared.broker.streams import ensure_consumer
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import encode
from nats.js.errors import NotFoundError

from tests.support.offers import ready_once
from tests.support.stack import Stack, StackFactory, step_of


async def take_ready_message(s: Stack, run_id: str, step_id: str) -> None:
    """Consume and acknowledge the ready message of a step that opens its run, as a
    dispatcher would once a runner accepted it."""
    nc = await s.connect()
    try:
        js = nc.jetstream()
        config = ready_consumer(Settings(), opening=True)
        await ensure_consumer(js, names.STEPS_STREAM, config)
        sub = await js.pull_subscribe_bind(config.durable_name, names.STEPS_STREAM)
        [msg] = await sub.fetch(1, timeout=10)
        assert msg.subject == names.step_ready(run_id, step_id, opens=True)
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
    await take_ready_message(s, run_id, "work")
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


async def test_after_a_reconnect_a_step_whose_outcome_is_stored_is_not_run_again(
    stack: StackFactory, tmp_path: Path
) -> None:
    """A broker killed mid-flight can forget a consumer's deliveries and acknowledgements
    and send a ready message again as a first delivery, its heartbeat lost with it. Once
    reconnected, the dispatcher checks every ready message for a while, and finds the
    runner's outcome stored. (No orchestrator here: the step record cannot tell.)"""
    s = await stack(runners=1, services=("dispatcher", "gateway"))
    ran = tmp_path / "ran"
    ready = ready_once("r1", ran)
    finished = names.stored_evt("r1", "s", "finished", "runner-0")
    async with await s.connect() as nc:
        js = nc.jetstream()
        await js.publish(
            names.step_ready("r1", "s"), encode(ready), headers={"Nats-Msg-Id": "first"}
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                await js.get_last_msg(names.EVENTS_STREAM, finished)
                break
            except NotFoundError:
                assert time.monotonic() < deadline, "the step never finished"
                await asyncio.sleep(0.05)
    assert s.nats is not None
    s.nats.kill()
    s.nats.start()
    async with await s.connect() as nc:
        js = nc.jetstream()
        hb = await js.key_value(names.HEARTBEATS_BUCKET)
        await hb.delete(names.heartbeat_key("r1", "s", "runner-0"))
        await js.publish(
            names.step_ready("r1", "s"), encode(ready), headers={"Nats-Msg-Id": "again"}
        )
        deadline = time.monotonic() + 20
        while '"msg":"already taken"' not in s.logs("dispatcher"):
            assert time.monotonic() < deadline, "the ready message was not dropped"
            await asyncio.sleep(0.05)
    assert ran.read_text() == "once\n"


async def test_an_assignment_whose_answer_was_lost_is_not_given_to_another_runner(
    stack: StackFactory, tmp_path: Path
) -> None:
    """The runner accepted and runs the step, but its answer never reaches the dispatcher
    (a broker that died in between): before offering the step elsewhere the dispatcher
    finds the attempt's heartbeat and lets it be. The step outlasts the dispatcher's wait
    (HEDDLE_ASSIGN_TIMEOUT, 1 s here): a shorter one's outcome would answer the offer."""
    s = await stack(runners=0)
    s.start("runner-lossy", HEDDLE_FAILPOINTS="runner.answer_lost")
    ran = tmp_path / "ran"
    await s.wait_ready(1)
    work = {"id": "work", "command": f"sleep 3; echo once >> {ran}"}
    run_id = await s.submit({"steps": [work]})
    deadline = time.monotonic() + 15
    while '"msg":"runner did not answer"' not in s.logs("dispatcher"):
        assert time.monotonic() < deadline, "the dispatcher never gave up on the answer"
        await asyncio.sleep(0.05)
    s.start("runner-good")  # free, and in the pool: a second taker if the step were offered
    run = await s.wait_run(run_id, timeout=20)
    assert run["status"] == "succeeded" and step_of(run, "work")["runner"] == "runner-lossy"
    await asyncio.sleep(1)  # time for a second offer, which must not come
    assert ran.read_text() == "once\n"
    assert '"msg":"already taken"' in s.logs("dispatcher")


async def test_two_copies_of_one_ready_attempt_run_it_once(
    stack: StackFactory, tmp_path: Path
) -> None:
    """Two ready messages for the same attempt (as a restarted broker can deliver, or a
    re-send past the duplicate window), with two runners free: the second copy waits while
    the first is offered, then is checked and dropped, instead of going to the other
    runner."""
    s = await stack(runners=2, services=("dispatcher", "gateway"))
    ran = tmp_path / "ran"
    ready = ready_once("r2", ran)
    async with await s.connect() as nc:
        js = nc.jetstream()
        for copy in ("one", "two"):
            await js.publish(
                names.step_ready("r2", "s"), encode(ready), headers={"Nats-Msg-Id": copy}
            )
    deadline = time.monotonic() + 20  # the held copy comes back after 10 s, and is dropped
    while '"msg":"already taken"' not in s.logs("dispatcher"):
        assert time.monotonic() < deadline, "the second copy was not dropped"
        await asyncio.sleep(0.05)
    assert ran.read_text() == "once\n"
