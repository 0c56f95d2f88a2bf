"""The dispatcher's line of ready steps waiting for a runner, woken in turn
(services/dispatcher/waiting.py): priority, then the run holding the fewest runners, then a
run under way before one opening, then arrival."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest
from heddle.services.dispatcher.waiting import KeyLine, Turn, WaitingLine, rank

pytestmark = pytest.mark.asyncio
ARRIVALS = itertools.count()


def turn(run: str = "r", priority: int = 0, opening: bool = False) -> Turn:
    return Turn(run, priority, opening, next(ARRIVALS))


async def _waiters(line: KeyLine, turns: list[Turn], timeout: float = 5.0) -> list[asyncio.Task]:
    tasks = [asyncio.create_task(line.wait(timeout, t)) for t in turns]
    await asyncio.sleep(0)  # every one in line, in order
    return tasks


def done(tasks: list[asyncio.Task]) -> list[bool]:
    return [t.done() for t in tasks]


async def test_one_free_runner_wakes_one_waiter_the_first():
    line = KeyLine()
    tasks = await _waiters(line, [turn() for _ in range(4)])
    assert line.wake(1) == 1
    await asyncio.sleep(0)
    assert done(tasks) == [True, False, False, False]
    assert tasks[0].result() is True
    assert len(line) == 3 and line.awake == 0
    line.close()
    await asyncio.gather(*tasks)


async def test_wake_counts_the_waiters_already_awake():
    line = KeyLine()
    tasks = await _waiters(line, [turn() for _ in range(4)])
    assert line.wake(1) == 1
    # Before the woken one resumes, a second runner frees up: one more, not two.
    assert line.wake(2) == 1
    assert line.wake(2) == 0
    await asyncio.sleep(0)
    assert done(tasks) == [True, True, False, False]
    assert line.awake == 0
    assert line.wake(0) == 0
    line.close()
    await asyncio.gather(*tasks)


async def test_a_waiter_beaten_to_the_runner_keeps_its_arrival():
    line = KeyLine()
    first = turn()
    tasks = await _waiters(line, [first, turn()])
    line.wake(1)
    await asyncio.sleep(0)
    again = asyncio.create_task(line.wait(5.0, first))  # in line again, as it came
    await asyncio.sleep(0)
    line.wake(1)
    await asyncio.sleep(0)
    assert again.done() and not tasks[1].done()
    line.close()
    await asyncio.gather(*tasks)


async def test_a_timeout_returns_false_and_leaves_the_line():
    line = KeyLine()
    assert await line.wait(0.01, turn()) is False
    assert len(line) == 0 and line.awake == 0
    assert line.wake(1) == 0


async def test_a_cancelled_waiter_passes_its_wake_on():
    line = KeyLine()
    tasks = await _waiters(line, [turn(), turn()])
    line.wake(1)
    tasks[0].cancel()  # woken, cancelled before it resumed
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    await asyncio.sleep(0)
    assert tasks[1].done() and tasks[1].result() is True
    assert line.awake == 0


async def test_a_cancelled_waiter_not_woken_leaves_the_line():
    line = KeyLine()
    tasks = await _waiters(line, [turn(), turn()])
    tasks[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert len(line) == 1
    line.wake(1)
    await asyncio.sleep(0)
    assert tasks[1].result() is True


async def test_close_wakes_everyone_and_stops_waiting():
    line = KeyLine()
    tasks = await _waiters(line, [turn() for _ in range(3)])
    line.close()
    assert await asyncio.gather(*tasks) == [True, True, True]
    assert await asyncio.wait_for(line.wait(60.0, turn()), 1.0) is True
    assert line.awake == 0


async def test_steps_of_runs_under_way_are_woken_before_steps_that_open_a_run():
    line = KeyLine()
    opening = await _waiters(line, [turn("o1", opening=True), turn("o2", opening=True)])
    under_way = await _waiters(line, [turn("u1"), turn("u2")])
    assert line.wake(3) == 3
    await asyncio.sleep(0)
    # Both under way first, though they came later; then the first opening step.
    assert done(under_way + opening) == [True, True, True, False]
    line.close()
    await asyncio.gather(*opening)


async def test_free_runners_go_to_the_run_holding_the_fewest():
    loads = Counter({"big": 4, "mid": 1})
    line = KeyLine(lambda: loads)
    big = await _waiters(line, [turn("big") for _ in range(3)])
    small = await _waiters(line, [turn("small", opening=True)])
    mid = await _waiters(line, [turn("mid")])
    line.wake(1)
    await asyncio.sleep(0)
    assert done(small + mid + big) == [True, False, False, False, False]
    loads["small"] = 1
    line.wake(1)
    await asyncio.sleep(0)
    # "mid" and "small" hold one each now: the one under way goes first.
    assert done(mid + big) == [True, False, False, False]
    line.close()
    await asyncio.gather(*big)


async def test_a_higher_priority_goes_first_whatever_the_runs_hold():
    loads = Counter({"urgent": 9})
    line = KeyLine(lambda: loads)
    low = await _waiters(line, [turn("low", priority=-1)])
    normal = await _waiters(line, [turn("normal")])
    urgent = await _waiters(line, [turn("urgent", priority=5, opening=True)])
    for expected in ([False, False, True], [False, True, True], [True, True, True]):
        line.wake(1)
        await asyncio.sleep(0)
        assert done(low + normal + urgent) == expected


async def test_rank_orders_priority_then_load_then_kind_then_arrival():
    loads = Counter({"a": 2})
    turns = [
        Turn("a", 0, False, 1),
        Turn("b", 0, True, 2),
        Turn("b", 0, False, 3),
        Turn("c", 1, True, 4),
        Turn("b", 0, False, 0),
    ]
    ordered = sorted(turns, key=lambda t: rank(t, loads))
    assert [t.arrival for t in ordered] == [4, 0, 3, 2, 1]


async def test_a_step_that_just_came_leaves_a_free_runner_to_one_before_it():
    loads = Counter({"big": 3})
    line = WaitingLine(lambda: loads)
    waiting = asyncio.create_task(line.wait(5, turn("small", opening=True)))
    await asyncio.sleep(0)
    assert line.ahead("", turn("big"))  # a big run's step, just come: the small one first
    assert not line.ahead("", turn("urgent", priority=1))
    assert not line.ahead("gpu", turn("big"))  # nobody waits for that key
    line.close()
    await waiting


async def test_free_runners_wake_only_the_waiters_of_the_keys_they_serve() -> None:
    line = WaitingLine()
    gpu = [asyncio.create_task(line.wait(5, turn(), key="gpu")) for _ in range(2)]
    cpu = [asyncio.create_task(line.wait(5, turn())) for _ in range(2)]
    await asyncio.sleep(0)
    assert len(line) == 4
    # One default runner free, every GPU runner busy: one default waiter wakes, no GPU one.
    assert line.wake({"": 1, "gpu": 0}) == 1
    await asyncio.sleep(0)
    assert done(cpu + gpu) == [True, False, False, False]
    assert line.wake({"gpu": 2}) == 2
    await asyncio.sleep(0)
    assert all(t.done() for t in gpu) and line.awake == 0
    line.close()
    await asyncio.gather(*cpu)


async def test_a_runner_restricted_to_namespaces_wakes_a_waiter_of_its_own():
    line = KeyLine()
    theirs, ours = turn("team-b=r"), turn("team-a=r")
    tasks = await _waiters(line, [theirs, ours])
    # The first in turn is team-b's, but the free runner serves team-a alone.
    assert line.wake(1, [frozenset({"team-a"})]) == 1
    await asyncio.sleep(0)
    assert done(tasks) == [False, True]
    assert line.unfit(False, [frozenset({"team-a"})]) == 1  # team-b's holds no credit
    assert line.unfit(False, [None]) == 0
    line.close()


async def test_each_waiter_takes_a_runner_it_may_use_the_restricted_first():
    line = KeyLine()
    a1, b1, a2 = turn("team-a=1"), turn("team-b=1"), turn("team-a=2")
    tasks = await _waiters(line, [a1, b1, a2])
    # a1 takes the team-a runner, not the one for all, which is left to b1; a2 has none.
    assert line.wake(2, [None, frozenset({"team-a"})]) == 2
    await asyncio.sleep(0)
    assert done(tasks) == [True, True, False]
    line.close()


async def test_a_waiter_ahead_counts_only_if_it_may_use_the_runner():
    line = WaitingLine(serving=lambda key: [frozenset({"team-a"})])
    task = asyncio.create_task(line.wait(5.0, turn("team-b=r", priority=5), key="gpu"))
    await asyncio.sleep(0)
    mine = turn("team-a=r")
    assert line.ahead("gpu", mine)
    assert not line.ahead("gpu", mine, competes=lambda t: t.run_id.startswith("team-a="))
    assert line.unfit("gpu", False) == 1 and line.unfit("", False) == 0
    assert line.wake({"gpu": 1}) == 0  # the free runner is not for it: it keeps waiting
    line.close()
    assert await task is True
