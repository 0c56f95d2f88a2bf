"""The dispatcher's line of ready steps waiting for a runner (services/dispatcher/waiting.py)."""

from __future__ import annotations

import asyncio

import pytest
from heddle.services.dispatcher.waiting import KeyLine, WaitingLine

pytestmark = pytest.mark.asyncio


async def _waiters(line: KeyLine, n: int, timeout: float = 5.0) -> list[asyncio.Task]:
    tasks = [asyncio.create_task(line.wait(timeout)) for _ in range(n)]
    await asyncio.sleep(0)  # every one in line, in order
    return tasks


async def test_one_free_runner_wakes_one_waiter_the_first():
    line = KeyLine()
    tasks = await _waiters(line, 4)
    assert line.wake(1) == 1
    await asyncio.sleep(0)
    assert [t.done() for t in tasks] == [True, False, False, False]
    assert tasks[0].result() is True
    assert len(line) == 3 and line.awake == 0
    line.close()
    await asyncio.gather(*tasks)


async def test_wake_counts_the_waiters_already_awake():
    line = KeyLine()
    tasks = await _waiters(line, 4)
    assert line.wake(1) == 1
    # Before the woken one resumes, a second runner frees up: one more, not two.
    assert line.wake(2) == 1
    assert line.wake(2) == 0
    await asyncio.sleep(0)
    assert [t.done() for t in tasks] == [True, True, False, False]
    assert line.awake == 0
    assert line.wake(0) == 0
    line.close()
    await asyncio.gather(*tasks)


async def test_a_waiter_beaten_to_the_runner_keeps_its_place_at_the_front():
    line = KeyLine()
    tasks = await _waiters(line, 2)
    line.wake(1)
    await asyncio.sleep(0)
    again = asyncio.create_task(line.wait(5.0, front=True))
    await asyncio.sleep(0)
    line.wake(1)
    await asyncio.sleep(0)
    assert again.done() and not tasks[1].done()
    line.close()
    await asyncio.gather(*tasks)


async def test_a_timeout_returns_false_and_leaves_the_line():
    line = KeyLine()
    assert await line.wait(0.01) is False
    assert len(line) == 0 and line.awake == 0
    assert line.wake(1) == 0


async def test_a_cancelled_waiter_passes_its_wake_on():
    line = KeyLine()
    tasks = await _waiters(line, 2)
    line.wake(1)
    tasks[0].cancel()  # woken, cancelled before it resumed
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    await asyncio.sleep(0)
    assert tasks[1].done() and tasks[1].result() is True
    assert line.awake == 0


async def test_a_cancelled_waiter_not_woken_leaves_the_line():
    line = KeyLine()
    tasks = await _waiters(line, 2)
    tasks[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert len(line) == 1
    line.wake(1)
    await asyncio.sleep(0)
    assert tasks[1].result() is True


async def test_close_wakes_everyone_and_stops_waiting():
    line = KeyLine()
    tasks = await _waiters(line, 3)
    line.close()
    assert await asyncio.gather(*tasks) == [True, True, True]
    assert await asyncio.wait_for(line.wait(60.0), 1.0) is True
    assert line.awake == 0


async def test_steps_of_runs_under_way_are_woken_before_steps_that_open_a_run():
    line = KeyLine()
    opening = [asyncio.create_task(line.wait(5.0, opening=True)) for _ in range(2)]
    await asyncio.sleep(0)
    under_way = await _waiters(line, 2)
    assert len(line) == 4 and line.under_way == 2
    assert line.wake(3) == 3
    # Both under way first, though they came later; then the first opening step.
    assert line.under_way == 2  # woken, not yet resumed: still theirs to take
    await asyncio.sleep(0)
    assert [t.done() for t in under_way + opening] == [True, True, True, False]
    assert line.under_way == 0 and line.awake == 0
    line.close()
    await asyncio.gather(*opening)


async def test_an_opening_step_beaten_to_the_runner_waits_at_the_front_of_its_own_line():
    line = KeyLine()
    opening = [asyncio.create_task(line.wait(5.0, opening=True)) for _ in range(2)]
    await asyncio.sleep(0)
    line.wake(1)
    await asyncio.sleep(0)
    assert opening[0].done()
    again = asyncio.create_task(line.wait(5.0, front=True, opening=True))
    under_way = await _waiters(line, 1)
    line.wake(1)
    await asyncio.sleep(0)
    assert under_way[0].done() and not again.done() and not opening[1].done()
    line.wake(1)
    await asyncio.sleep(0)
    assert again.done() and not opening[1].done()
    line.close()
    await asyncio.gather(*opening)


async def test_a_cancelled_under_way_waiter_passes_its_wake_to_an_opening_one():
    line = KeyLine()
    opening = asyncio.create_task(line.wait(5.0, opening=True))
    [under_way] = await _waiters(line, 1)
    line.wake(1)
    under_way.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert opening.done() and opening.result() is True
    assert line.under_way == 0 and line.awake == 0


async def test_free_runners_wake_only_the_waiters_of_the_keys_they_serve() -> None:
    line = WaitingLine()
    gpu = [asyncio.create_task(line.wait(5, key="gpu")) for _ in range(2)]
    cpu = [asyncio.create_task(line.wait(5)) for _ in range(2)]
    await asyncio.sleep(0)
    assert len(line) == 4
    # One default runner free, every GPU runner busy: one default waiter wakes, no GPU one.
    assert line.wake({"": 1, "gpu": 0}) == 1
    await asyncio.sleep(0)
    assert [t.done() for t in cpu + gpu] == [True, False, False, False]
    assert line.wake({"gpu": 2}) == 2
    await asyncio.sleep(0)
    assert all(t.done() for t in gpu) and line.under_way("gpu") == 0
    line.close()
    await asyncio.gather(*cpu)
