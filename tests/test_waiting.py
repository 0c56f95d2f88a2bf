"""The dispatcher's line of ready steps waiting for a runner (services/dispatcher/waiting.py)."""

from __future__ import annotations

import asyncio

import pytest

from services.dispatcher.waiting import WaitingLine

pytestmark = pytest.mark.asyncio


async def _waiters(line: WaitingLine, n: int, timeout: float = 5.0) -> list[asyncio.Task]:
    tasks = [asyncio.create_task(line.wait(timeout)) for _ in range(n)]
    await asyncio.sleep(0)  # every one in line, in order
    return tasks


async def test_one_free_runner_wakes_one_waiter_the_first():
    line = WaitingLine()
    tasks = await _waiters(line, 4)
    assert line.wake(1) == 1
    await asyncio.sleep(0)
    assert [t.done() for t in tasks] == [True, False, False, False]
    assert tasks[0].result() is True
    assert len(line) == 3 and line.awake == 0
    line.close()
    await asyncio.gather(*tasks)


async def test_wake_counts_the_waiters_already_awake():
    line = WaitingLine()
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
    line = WaitingLine()
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
    line = WaitingLine()
    assert await line.wait(0.01) is False
    assert len(line) == 0 and line.awake == 0
    assert line.wake(1) == 0


async def test_a_cancelled_waiter_passes_its_wake_on():
    line = WaitingLine()
    tasks = await _waiters(line, 2)
    line.wake(1)
    tasks[0].cancel()  # woken, cancelled before it resumed
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    await asyncio.sleep(0)
    assert tasks[1].done() and tasks[1].result() is True
    assert line.awake == 0


async def test_a_cancelled_waiter_not_woken_leaves_the_line():
    line = WaitingLine()
    tasks = await _waiters(line, 2)
    tasks[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert len(line) == 1
    line.wake(1)
    await asyncio.sleep(0)
    assert tasks[1].result() is True


async def test_close_wakes_everyone_and_stops_waiting():
    line = WaitingLine()
    tasks = await _waiters(line, 3)
    line.close()
    assert await asyncio.gather(*tasks) == [True, True, True]
    assert await asyncio.wait_for(line.wait(60.0), 1.0) is True
    assert line.awake == 0
