"""The ready steps in a dispatcher's hand that wait for a free runner, in line. No I/O.

A runner that frees up wakes one waiter, not all of them: ``wake(free)`` wakes the first of
the line until as many are awake as there are free runners, since in a saturated pool every
other waiter woken would only look, find no runner and wait again (docs/performance.md). A
waiter that finds no runner after all (another step took it first) waits again at the
front, keeping its place.

Steps wait by the label key they ask for (shared/core/labels.py), each key a line of its own
woken by the free runners that serve it: a step waiting for a busy pool never stands in
front of another pool's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping


class WaitingLine:
    """The lines of every label key; "" is the default pool's."""

    def __init__(self) -> None:
        self._lines: dict[str, KeyLine] = {}
        self._closed = False

    def __len__(self) -> int:
        """Waiters not woken yet."""
        return sum(len(line) for line in self._lines.values())

    @property
    def awake(self) -> int:
        return sum(line.awake for line in self._lines.values())

    def under_way(self, key: str = "") -> int:
        """Steps of runs under way waiting for a runner of ``key``, woken or not."""
        line = self._lines.get(key)
        return line.under_way if line is not None else 0

    def line(self, key: str = "") -> KeyLine:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = KeyLine()
            if self._closed:
                line.close()
        return line

    async def wait(
        self, timeout: float, *, front: bool = False, opening: bool = False, key: str = ""
    ) -> bool:
        """Until this waiter is woken (True), or ``timeout`` seconds (False)."""
        return await self.line(key).wait(timeout, front=front, opening=opening)

    def wake(self, free: Mapping[str, int]) -> int:
        """Wake waiters of each key until as many are awake as free runners serve it."""
        return sum(line.wake(free.get(key, 0)) for key, line in self._lines.items())

    def close(self) -> None:
        """Wake every waiter, and let none wait from now on (the dispatcher stops)."""
        self._closed = True
        for line in self._lines.values():
            line.close()


class KeyLine:
    """The waiters of one label key: steps of runs under way, then those that open a run."""

    def __init__(self) -> None:
        self._line: deque[asyncio.Future[bool]] = deque()  # steps of runs under way
        self._opening: deque[asyncio.Future[bool]] = deque()  # steps that open a run
        self._awake = 0  # woken, not yet resumed: each is about to take a free runner
        self._awake_under_way = 0  # of which steps of runs under way
        self._closed = False

    def __len__(self) -> int:
        """Waiters not woken yet."""
        return len(self._line) + len(self._opening)

    @property
    def awake(self) -> int:
        return self._awake

    @property
    def under_way(self) -> int:
        """Steps of runs under way waiting, woken or not: a step that opens a run leaves
        them a free runner."""
        return len(self._line) + self._awake_under_way

    async def wait(self, timeout: float, *, front: bool = False, opening: bool = False) -> bool:
        """Until this waiter is woken (True), or ``timeout`` seconds (False). A closed line
        does not wait."""
        if self._closed:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        line = self._opening if opening else self._line
        if front:
            line.appendleft(fut)
        else:
            line.append(fut)
        timer = loop.call_later(timeout, _expire, fut)
        try:
            woken = await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result():
                self._resumed(opening)
                self._wake_next()  # the wake meant for this waiter goes to the next one
            else:
                self._forget(line, fut)
            raise
        finally:
            timer.cancel()
        if woken:
            self._resumed(opening)
        else:
            self._forget(line, fut)
        return woken

    def wake(self, free: int) -> int:
        """Wake waiters until ``free`` are awake; how many this call woke."""
        woken = 0
        while self._awake < free and self._wake_next():
            woken += 1
        return woken

    def _wake_next(self) -> bool:
        for line in (self._line, self._opening):
            while line:
                fut = line.popleft()
                if not fut.done():
                    fut.set_result(True)
                    self._awake += 1
                    self._awake_under_way += line is self._line
                    return True
        return False

    def close(self) -> None:
        """Wake every waiter, and let none wait from now on (the dispatcher stops)."""
        self._closed = True
        while self._wake_next():
            pass

    def _resumed(self, opening: bool) -> None:
        self._awake -= 1
        self._awake_under_way -= not opening

    @staticmethod
    def _forget(line: deque[asyncio.Future[bool]], fut: asyncio.Future[bool]) -> None:
        try:
            line.remove(fut)
        except ValueError:
            pass


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
