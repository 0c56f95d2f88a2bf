"""Offers to one real runner, sent as a dispatcher or the orchestrator sends them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepReady, assign_reply_decoder, encode, event_decoder
from heddle.shared.wire.timefmt import from_epoch
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.support.stack import Stack, StackFactory


async def one_runner(stack: StackFactory, report_delay: str, assign_timeout: str) -> Client:
    """NATS and one runner, no other service; a connection of our own, once the runner
    answers on its subject."""
    s = await stack(
        runners=1,
        services=(),
        wait=False,
        HEDDLE_STARTED_REPORT_DELAY=report_delay,
        HEDDLE_ASSIGN_TIMEOUT=assign_timeout,
    )
    return await runner_listening(s)


async def runner_listening(s: Stack, runner: str = "runner-0") -> Client:
    nc = await s.connect()
    await ensure_resources(nc, Settings())  # a runner waits for what the services create
    deadline = time.monotonic() + 20
    while True:
        try:
            await nc.request(names.runner_assign(runner), b"not an assignment", timeout=0.5)
            return nc
        except Exception:
            assert time.monotonic() < deadline, "runner never listened"
            await asyncio.sleep(0.1)


async def assign(nc: Client, step_id: str, command: str) -> tuple[bool, asyncio.Queue]:
    """Send one assignment; returns once the runner answered, with a queue of the step's
    events (subscribed before the assignment went out)."""
    events = await step_events(nc, step_id)
    ready = ready_at_once(step_id, command)
    reply = await nc.request(names.runner_assign("runner-0"), encode(ready), timeout=10)
    return assign_reply_decoder.decode(reply.data).accepted, events


def ready_once(run_id: str, ran: Path) -> StepReady:
    """A ready message, as the orchestrator sends it, for a step that leaves a line in
    ``ran`` each time it runs."""
    return StepReady(
        run_id=run_id,
        step_id="s",
        attempt=1,
        command=f"echo once >> {ran}",
        timeout_seconds=30,
        ready_at=from_epoch(time.time()),
    )


async def assign_answered_by_outcome(
    nc: Client, step_id: str, command: str
) -> tuple[asyncio.Queue, asyncio.Queue]:
    """Send one assignment as a dispatcher's desk does (shared/broker/offers.py, OfferDesk):
    the outcome may answer it. Returns at once, with a queue of the runner's replies and one
    of the step's events (both subscribed before the assignment went out)."""
    replies: asyncio.Queue = asyncio.Queue()

    async def on_reply(msg: Msg) -> None:
        replies.put_nowait(assign_reply_decoder.decode(msg.data))

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=on_reply)
    events = await step_events(nc, step_id)
    await nc.publish(
        names.runner_assign("runner-0"),
        encode(ready_at_once(step_id, command)),
        reply=inbox,
        headers={names.ANSWER_HEADER: names.ANSWER_BY_OUTCOME},
    )
    return replies, events


async def step_events(nc: Client, step_id: str) -> asyncio.Queue:
    """A queue of the events runner-0 sends about ``step_id`` of run r1, from now on."""
    events: asyncio.Queue = asyncio.Queue()

    async def on_event(msg: Msg) -> None:
        events.put_nowait(event_decoder.decode(msg.data))

    await nc.subscribe(names.evt("r1", step_id, "*", "runner-0"), cb=on_event)
    return events


def ready_at_once(step_id: str, command: str) -> StepReady:
    return StepReady(
        run_id="r1",
        step_id=step_id,
        attempt=1,
        command=command,
        timeout_seconds=60,
        ready_at="2026-01-01T00:00:00.000Z",
    )
