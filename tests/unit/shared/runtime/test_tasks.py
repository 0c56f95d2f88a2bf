"""Stopping background tasks when a cancellation gets lost (shared/runtime/tasks.py)."""

from __future__ import annotations

import asyncio
import time

from heddle.shared.runtime.tasks import cancel_and_wait


async def loses_its_first_cancellation(entered: asyncio.Event) -> None:
    """As a loop does when asyncio.wait_for hands it a result instead of the cancellation
    (Python 3.11): it carries on to its next long wait."""
    entered.set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass
    await asyncio.sleep(3600)


async def test_a_task_that_lost_its_cancellation_is_cancelled_again() -> None:
    entered = asyncio.Event()
    stubborn = asyncio.create_task(loses_its_first_cancellation(entered))
    plain = asyncio.create_task(asyncio.sleep(3600))
    await entered.wait()
    t0 = time.monotonic()
    await asyncio.wait_for(cancel_and_wait(stubborn, plain, None, patience=0.05), 10)
    assert stubborn.cancelled() and plain.cancelled()
    assert time.monotonic() - t0 < 5  # the second round, not the hour


async def test_finished_and_failed_tasks_are_waited_without_raising() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    done = asyncio.create_task(asyncio.sleep(0))
    failing = asyncio.create_task(fails())
    await asyncio.sleep(0.01)
    await cancel_and_wait(done, failing)  # nothing raised, nothing left
    assert done.done() and failing.done()


async def test_a_task_that_never_stops_is_given_up_on_after_the_rounds() -> None:
    released = asyncio.Event()

    async def ignores_cancellation() -> None:
        while not released.is_set():
            try:
                await released.wait()
            except asyncio.CancelledError:
                pass

    task = asyncio.create_task(ignores_cancellation())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, patience=0.01, rounds=3), 5)
    assert not task.done()  # returned after its rounds instead of waiting forever
    released.set()
    await task
