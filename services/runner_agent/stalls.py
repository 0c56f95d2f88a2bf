"""Noticing that this runner's own event loop stood still (the process stopped, its pod
frozen, its machine paused), so an assignment that waited through it is refused.

An assignment that sat unread in the socket while the runner stood still may have been given
up by whoever offered it: a dispatcher that heard no answer within ``HEDDLE_ASSIGN_TIMEOUT``
looks for the attempt's heartbeat or outcome, finds neither, and offers the same attempt to
another runner. Run then, it would run twice. A core message carries no time the runner
could trust, but the runner can tell that it stood still: a tick every quarter of the limit
that comes later than it should. An assignment handled while a tick is overdue by more than
the limit, or within one tick of such a stall, is refused; a refusal is always safe (the step
goes to another runner). The limit is half the assignment timeout: an assignment accepted
before it is answered within a quarter of the timeout more (attempt.py), so in time.
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
        self.watch.tick(time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(self.watch.every, self._tick)

    def _tick(self) -> None:
        self.watch.tick(time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(self.watch.every, self._tick)

    def stall_before_now(self) -> float:
        return self.watch.stall_before(time.monotonic())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
