"""A request given up when its connection drops (shared/broker/cut_off.py), on a plain
event loop: its answer when it comes first, AcknowledgementLost when the drop does, and the
request itself cancelled then."""

from __future__ import annotations

import asyncio

import pytest
from heddle.shared.broker.cut_off import CutOff
from heddle.shared.wire.errors import AcknowledgementLost


async def test_the_answer_that_comes_first_is_returned() -> None:
    cut = CutOff()

    async def answered() -> int:
        await asyncio.sleep(0)
        return 7

    assert await cut.unless_dropped(answered(), "member.a") == 7


async def test_a_drop_gives_up_the_request_and_cancels_it() -> None:
    cut = CutOff()
    never = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(cut.unless_dropped(never, "part.3"))
    await asyncio.sleep(0)
    cut.dropped()
    with pytest.raises(AcknowledgementLost, match=r"part\.3"):
        await waiting
    assert never.cancelled()


async def test_a_request_after_the_drop_waits_for_the_next_one() -> None:
    cut = CutOff()
    cut.dropped()  # an earlier drop does not end the requests made after it

    async def answered() -> str:
        await asyncio.sleep(0.01)
        return "ok"

    assert await cut.unless_dropped(answered(), "member.a") == "ok"


async def test_an_error_of_the_request_is_its_own() -> None:
    cut = CutOff()

    async def refused() -> None:
        raise KeyError("wrong last sequence")

    with pytest.raises(KeyError):
        await cut.unless_dropped(refused(), "part.1")
