"""Noticing that this process's own event loop stood still (the process stopped, its pod
frozen, its machine paused), so that what waited through the stall is not acted on.

A message can wait unread, or read and not yet handled, while a process stands still, and
whoever sent it may have given it up meanwhile: a dispatcher that heard no answer to an
offer within ``HEDDLE_ASSIGN_TIMEOUT`` offers the same attempt to another runner, and the
server gives a ready message a dispatcher held past its acknowledgement wait to another
dispatcher. Acted on then, the step would run twice. A core message carries no time a
process could trust, but a process can tell that it stood still: a tick every quarter of the
limit that comes later than it should. What is handled while a tick is overdue by more than
the limit, or within one tick of such a stall, is let go (a runner refuses the assignment,
services/runner_agent/assignments.py; a dispatcher leaves the ready message to come back,
services/dispatcher/placing.py): letting go is always safe.
"""

from __future__ import annotations

import asyncio
import math
import time


class StallWatch:
    """Pure: the ticks' times in, whether a moment follows a stall out."""

    def __init__(self, limit: float, now: float) -> None:
        self.limit = limit  # a stall longer than this makes what waited through it stale
        self.every = limit / 4  # between ticks
        self._last = now  # the last tick
        self._noticed = -math.inf  # when the last stall over the limit ended
        self._stall = 0.0

    def tick(self, now: float) -> None:
        late = now - self._last - self.every
        if late > self.limit:
            self._noticed, self._stall = now, late
        self._last = now

    def stall_before(self, now: float) -> float:
        """How long the loop stood still just before ``now`` (seconds), if longer than the
        limit; 0 if it did not."""
        overdue = now - self._last - self.every  # the tick has not come yet: still waking
        if overdue > self.limit:
            return overdue
        if now - self._noticed <= self.every:
            return self._stall
        return 0.0


class LoopStalls:
    """A StallWatch ticked by the running event loop (``start`` within it, ``stop``)."""

    def __init__(self, limit: float) -> None:
        self.watch = StallWatch(limit, time.monotonic())
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        # Timed from here: the time a service took to start up is no stall of its loop.
        self.watch = StallWatch(self.watch.limit, time.monotonic())
        self._tick()

    def _tick(self) -> None:
        self.watch.tick(time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(self.watch.every, self._tick)

    def stall_before_now(self) -> float:
        return self.watch.stall_before(time.monotonic())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
