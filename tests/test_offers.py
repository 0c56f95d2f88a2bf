"""How an offer to a runner is read, against a real nats-server: the one reading that the
dispatchers' offers and the orchestrator's handoffs share (shared/broker/offers.py)."""

from __future__ import annotations

import asyncio

import pytest
from heddle.shared.broker.offers import Answer, offer
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, encode
from nats.aio.client import Client
from nats.aio.msg import Msg


@pytest.fixture
def nc(heddle_nc: Client) -> Client:
    return heddle_nc


async def answering(nc: Client, runner: str, reply: bytes | None, after: float = 0.0) -> None:
    async def answer(msg: Msg) -> None:
        await asyncio.sleep(after)
        if reply is not None:
            await msg.respond(reply)

    await nc.subscribe(names.runner_assign(runner), cb=answer)
    await nc.flush()


async def test_an_accepting_runner_s_reply_comes_back_with_its_count(nc: Client) -> None:
    await answering(nc, "r1", encode(AssignReply(accepted=True, runner="r1", jobs=7)))
    offered = await offer(nc, "r1", b"{}", timeout=2)
    assert offered.answer is Answer.ACCEPTED
    assert offered.reply is not None and offered.reply.jobs == 7


async def test_a_busy_runner_refuses(nc: Client) -> None:
    await answering(nc, "r1", encode(AssignReply(accepted=False, runner="r1", reason="busy")))
    assert (await offer(nc, "r1", b"{}", timeout=2)).answer is Answer.REFUSED


async def test_nobody_listening_means_the_offer_never_arrived(nc: Client) -> None:
    offered = await offer(nc, "nobody", b"{}", timeout=2)
    assert offered.answer is Answer.UNREACHED
    assert offered.error == "NoRespondersError"


async def test_a_late_or_garbled_answer_means_it_may_have_arrived(nc: Client) -> None:
    await answering(nc, "slow", encode(AssignReply(accepted=True, runner="slow")), after=1.0)
    await answering(nc, "garbled", b"not json")
    slow = await offer(nc, "slow", b"{}", timeout=0.2)
    garbled = await offer(nc, "garbled", b"{}", timeout=2)
    assert (slow.answer, garbled.answer) == (Answer.UNANSWERED, Answer.UNANSWERED)
    assert slow.error is not None and "Timeout" in slow.error
    assert garbled.error == "DecodeError"
