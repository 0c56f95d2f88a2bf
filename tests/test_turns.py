"""services/dispatcher/turns.py: the line for free runners, by priority then arrival."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.dispatcher.turns import CONTINUING, STARTING, Turns


def runners(*names: str) -> Callable[[], str | None]:
    free = list(names)
    return lambda: free.pop(0) if free else None


async def test_steps_of_runs_under_way_go_first_then_first_come_first_served() -> None:
    turns = Turns()
    a = turns.wait(STARTING)
    b = turns.wait(STARTING)
    c = turns.wait(CONTINUING)
    d = turns.wait(CONTINUING)
    assert turns.ahead(STARTING) and turns.ahead(CONTINUING) and turns.waiting() == 4
    assert turns.grant(runners("r1", "r2", "r3")) == 3
    assert [f.result() for f in (c, d, a)] == ["r1", "r2", "r3"]
    assert not b.done() and turns.waiting() == 1
    assert turns.ahead(STARTING) and not turns.ahead(CONTINUING)
    assert turns.grant(runners()) == 0 and not b.done()
    assert turns.grant(runners("r4", "r5")) == 1 and b.result() == "r4"
    assert turns.waiting() == 0 and not turns.ahead(STARTING)


async def test_a_waiter_that_left_is_skipped_and_costs_no_runner() -> None:
    turns = Turns()
    gone = turns.wait(CONTINUING)
    stays = turns.wait(STARTING)
    gone.cancel()
    assert not turns.ahead(CONTINUING) and turns.ahead(STARTING)
    reserved: list[str] = []

    def reserve() -> str | None:
        reserved.append(f"r{len(reserved) + 1}")
        return reserved[-1]

    assert turns.grant(reserve) == 1
    assert stays.result() == "r1" and reserved == ["r1"]


async def test_a_served_waiter_wakes_with_its_runner() -> None:
    turns = Turns()
    waiter = asyncio.ensure_future(asyncio.wait_for(turns.wait(STARTING), 5))
    await asyncio.sleep(0)
    turns.grant(runners("r9"))
    assert await waiter == "r9"
