"""How an offer to a runner is answered and read, against a real nats-server: the desk the
dispatchers' offers and the orchestrator's handoffs share (shared/broker/offers.py), which
takes a reply or the attempt's outcome as the answer."""

from __future__ import annotations

import asyncio

import pytest
from heddle.shared.broker.offers import Answer, OfferDesk, Offered
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, StepFinished, encode
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


ATTEMPT = ("run-1", "build", 1, "tk-1")


def outcome(runner: str, ticket: str = "tk-1", jobs: int = 3) -> StepFinished:
    run_id, step_id, attempt, _ = ATTEMPT
    return StepFinished(
        run_id=run_id,
        step_id=step_id,
        attempt=attempt,
        runner=runner,
        ticket=ticket,
        outcome="succeeded",
        finished_at="2026-12-06T07:00:00.000Z",
        jobs=jobs,
    )


async def silent(nc: Client, runner: str) -> asyncio.Queue[Msg]:
    """A runner that takes every offer and answers none; the offers it got."""
    got: asyncio.Queue[Msg] = asyncio.Queue()

    async def take(msg: Msg) -> None:
        got.put_nowait(msg)

    await nc.subscribe(names.runner_assign(runner), cb=take)
    await nc.flush()
    return got


async def started_desk(nc: Client) -> OfferDesk:
    desk = OfferDesk(nc)
    await desk.start()
    return desk


async def offering_to_silent(
    nc: Client, timeout: float
) -> tuple[OfferDesk, asyncio.Task[Offered], Msg]:
    """A desk's offer of ATTEMPT to a runner "r1" that answers nothing: the desk, the offer
    waiting for its answer, and the offer as the runner got it."""
    got = await silent(nc, "r1")
    desk = await started_desk(nc)
    offering = asyncio.create_task(desk.offer("r1", b"{}", ATTEMPT, timeout=timeout))
    return desk, offering, await asyncio.wait_for(got.get(), 5)


async def test_a_reply_is_read_as_the_runner_s_answer(nc: Client) -> None:
    await answering(nc, "r1", encode(AssignReply(accepted=True, runner="r1", jobs=7)))
    await answering(nc, "busy", encode(AssignReply(accepted=False, runner="busy", reason="busy")))
    await answering(nc, "garbled", b"not json")
    await answering(nc, "slow", encode(AssignReply(accepted=True, runner="slow")), after=1.0)
    desk = await started_desk(nc)
    accepted = await desk.offer("r1", b"{}", ATTEMPT, timeout=2)
    assert accepted.answer is Answer.ACCEPTED
    assert accepted.reply is not None and accepted.reply.jobs == 7
    assert (await desk.offer("busy", b"{}", ATTEMPT, timeout=2)).answer is Answer.REFUSED
    garbled = await desk.offer("garbled", b"{}", ATTEMPT, timeout=2)
    assert (garbled.answer, garbled.error) == (Answer.UNANSWERED, "DecodeError")
    # No runner listens: the offer never arrived. Too late: it may have arrived.
    nobody = await desk.offer("nobody", b"{}", ATTEMPT, timeout=2)
    assert (nobody.answer, nobody.error) == (Answer.UNREACHED, "NoRespondersError")
    slow = await desk.offer("slow", b"{}", ATTEMPT, timeout=0.2)
    assert (slow.answer, slow.error) == (Answer.UNANSWERED, "TimeoutError")


async def test_the_attempts_outcome_from_its_runner_answers_its_offer(nc: Client) -> None:
    desk, offering, offer_msg = await offering_to_silent(nc, timeout=5)
    # The offer says the outcome answers it, and where a reply would go.
    assert offer_msg.headers == {names.ANSWER_HEADER: names.ANSWER_BY_OUTCOME}
    assert offer_msg.reply.startswith(desk.inbox + ".")
    desk.heard(outcome("r1", jobs=9))
    offered = await asyncio.wait_for(offering, 1)
    assert offered.answer is Answer.ACCEPTED
    assert offered.reply is not None and offered.reply.jobs == 9


async def test_another_runners_or_attempts_outcome_answers_nothing(nc: Client) -> None:
    desk, offering, _ = await offering_to_silent(nc, timeout=0.5)
    desk.heard(outcome("r2"))  # the same attempt, from a runner it was not offered to
    desk.heard(outcome("r1", ticket="tk-0"))  # an earlier placement of it
    offered = await offering
    assert (offered.answer, offered.error) == (Answer.UNANSWERED, "TimeoutError")


async def test_a_reply_after_the_outcome_changes_nothing(nc: Client) -> None:
    desk, offering, offer_msg = await offering_to_silent(nc, timeout=5)
    desk.heard(outcome("r1", jobs=4))
    await offer_msg.respond(encode(AssignReply(accepted=False, runner="r1", reason="busy")))
    offered = await asyncio.wait_for(offering, 1)
    assert offered.answer is Answer.ACCEPTED
    assert offered.reply is not None and offered.reply.jobs == 4
