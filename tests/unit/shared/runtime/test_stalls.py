"""StallWatch (shared/runtime/stalls.py): when a moment follows a stall of the loop."""

from __future__ import annotations

import time

import pytest
from heddle.shared.runtime.stalls import LoopStalls, StallWatch

LIMIT = 1.0  # ticks every 0.25


def ticked(*times: float) -> StallWatch:
    watch = StallWatch(LIMIT, 0.0)
    for t in times:
        watch.tick(t)
    return watch


def test_ticks_on_time_are_no_stall() -> None:
    watch = ticked(0.25, 0.5, 0.75, 1.0)
    assert watch.every == 0.25
    assert [watch.stall_before(t) for t in (1.0, 1.1, 1.25)] == [0.0, 0.0, 0.0]


def test_a_late_tick_within_the_limit_is_no_stall() -> None:
    watch = ticked(0.25, 1.4)  # 0.9 s late
    assert watch.stall_before(1.41) == 0.0


@pytest.mark.parametrize("after", [0.0, 0.01, 0.25])
def test_what_follows_a_stall_within_a_tick_is_after_it(after: float) -> None:
    watch = ticked(0.25, 3.0)  # 2.5 s late
    assert watch.stall_before(3.0 + after) == pytest.approx(2.5)


def test_a_tick_after_the_stall_ends_it() -> None:
    watch = ticked(0.25, 3.0)
    assert watch.stall_before(3.26) == 0.0
    watch.tick(3.25)
    assert watch.stall_before(3.3) == 0.0


def test_an_overdue_tick_is_a_stall_before_the_tick_comes() -> None:
    # The loop is moving again, and this moment comes before the late tick does.
    watch = ticked(0.25)
    assert watch.stall_before(1.4) == 0.0  # 0.9 s overdue
    assert watch.stall_before(2.0) == pytest.approx(1.5)
    watch.tick(2.0)
    assert watch.stall_before(2.01) == pytest.approx(1.5)  # the same stall, now noticed


def test_the_latest_stall_is_the_one_told() -> None:
    watch = ticked(0.25, 3.0, 3.25, 6.0)
    assert watch.stall_before(6.1) == pytest.approx(2.5)
    watch = ticked(0.25, 3.0, 3.25, 5.0)
    assert watch.stall_before(5.1) == pytest.approx(1.5)


async def test_a_loop_watch_started_late_sees_no_stall_of_its_start_up() -> None:
    """A service builds its watch, then takes longer than the limit to connect and start."""
    stalls = LoopStalls(0.05)
    time.sleep(0.2)  # start-up work, before the loop watch is started
    stalls.start()
    try:
        assert stalls.stall_before_now() == 0.0
    finally:
        stalls.stop()
