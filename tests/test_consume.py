"""shared/broker/consume.py through a continuous pull, against a real nats-server: what a handler
returns is what the server does with the message. Done and refused: never again. Failed
and not yet: again after their named delays. Left: again once the ack wait passed. Waiting:
held past the ack wait. A handler that raises counts as failed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.consume import (
    NOT_YET_DELAY,
    RETRY_AFTER_FAILURE,
    Outcome,
    redelivered,
    settle,
)
from heddle.shared.broker.pull import ContinuousPull
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

ACK_WAIT = 3.0
FIRST = {  # what the handler answers the first delivery of each subject; later ones: done
    "c.done": Outcome.DONE,
    "c.refused": Outcome.REFUSED,
    "c.failed": Outcome.FAILED,
    "c.early": Outcome.NOT_YET,
    "c.left": Outcome.LEFT,
    "c.returned": Outcome.RETURNED,
    "c.waiting": Outcome.HELD,
}


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    js = client.jetstream()
    await js.add_stream(name="C", subjects=["c.>"])
    await js.add_consumer(
        "C", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT)
    )
    yield client
    await client.close()


async def test_each_outcome_is_what_the_server_does_with_the_message(nc: Client) -> None:
    seen: dict[str, list[tuple[float, bool]]] = {}  # subject -> (time, redelivered)
    held: list[asyncio.Task] = []

    async def keep_waiting(msg: Msg) -> None:
        # Held past its ack wait, but told the server it is still being worked on.
        for _ in range(2):
            await asyncio.sleep(ACK_WAIT * 0.6)
            await settle(msg, Outcome.WAITING)
        await settle(msg, Outcome.DONE)

    async def handler(msg: Msg) -> Outcome:
        deliveries = seen.setdefault(msg.subject, [])
        deliveries.append((time.monotonic(), redelivered(msg)))
        if len(deliveries) > 1:
            return Outcome.DONE
        if msg.subject == "c.raises":
            raise RuntimeError("a handler's bug")
        if msg.subject == "c.waiting":
            held.append(asyncio.create_task(keep_waiting(msg)))
        return FIRST[msg.subject]

    pull = ContinuousPull(nc, "C", "d", handler, credit=16)
    await pull.start()
    try:
        js = nc.jetstream()
        for subject in [*FIRST, "c.raises"]:
            await js.publish(subject, b"x")
        await asyncio.sleep(ACK_WAIT * 2)
    finally:
        await pull.stop()
        for task in held:
            task.cancel()

    def again_after(subject: str) -> float:
        (first, was), (second, is_) = seen[subject]
        assert (was, is_) == (False, True)
        return second - first

    assert [len(seen[s]) for s in ("c.done", "c.refused", "c.waiting")] == [1, 1, 1]
    assert RETRY_AFTER_FAILURE * 0.9 <= again_after("c.failed") < ACK_WAIT
    assert RETRY_AFTER_FAILURE * 0.9 <= again_after("c.raises") < ACK_WAIT
    assert NOT_YET_DELAY * 0.9 <= again_after("c.early") < ACK_WAIT
    assert again_after("c.left") >= ACK_WAIT * 0.95
    assert again_after("c.returned") < NOT_YET_DELAY


async def test_a_pull_asks_for_at_least_its_batch_and_nothing_while_the_credit_is_below(
    nc: Client,
) -> None:
    """The dispatcher's lookahead is refilled a few at a time: a credit below ``at_least``
    sends no pull request (the server holds none), one that reaches it asks for all of it."""
    got: list[str] = []
    arrived = asyncio.Event()

    async def handler(msg: Msg) -> Outcome:
        got.append(msg.data.decode())
        # In hand, as the dispatcher's unplaced steps are: one credit less.
        pull.set_credit(pull.credit - 1, pull.at_least)
        arrived.set()
        return Outcome.DONE

    js = nc.jetstream()
    for n in range(8):
        await js.publish("c.batch", str(n).encode())
    pull = ContinuousPull(nc, "C", "d", handler, credit=0)
    await pull.start()
    try:

        async def waiting_requests() -> int:
            await nc.flush()
            return (await js.consumer_info("C", "d")).num_waiting

        pull.set_credit(2, at_least=3)
        await pull.top_up()
        assert (pull.outstanding, await waiting_requests(), got) == (0, 0, [])
        pull.set_credit(3, at_least=3)
        await pull.top_up()
        while len(got) < 3:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 5)
        assert got == ["0", "1", "2"]
        assert (await js.consumer_info("C", "d")).num_pending == 5
        # Served at once: one message for one free runner.
        pull.set_credit(1, at_least=1)
        await pull.top_up()
        while len(got) < 4:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 5)
        assert got == ["0", "1", "2", "3"]
        assert (await waiting_requests(), (await js.consumer_info("C", "d")).num_pending) == (0, 4)
    finally:
        await pull.stop()
