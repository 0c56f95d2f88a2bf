"""Who gets the next free runner. Ready steps wait in line by priority, first come first
served within one: the steps of runs already under way (``CONTINUING``) before the first
steps of runs not started yet (``STARTING``). Under load, runs then finish roughly in the
order they began instead of all advancing together and finishing together at the end.

No I/O: the dispatcher calls ``grant`` whenever a runner may have become free, with its
pool's ``reserve``; a waiter is handed the name of the runner reserved for it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

CONTINUING = 0
STARTING = 1
PRIORITIES = (CONTINUING, STARTING)


class Turns:
    def __init__(self) -> None:
        self._lines: dict[int, deque[asyncio.Future[str]]] = {p: deque() for p in PRIORITIES}

    def ahead(self, priority: int) -> bool:
        """Whether a step of this priority or a higher one is waiting."""
        return any(self._live(self._lines[p]) for p in PRIORITIES if p <= priority)

    def wait(self, priority: int) -> asyncio.Future[str]:
        """A place at the back of the line: resolves to a reserved runner's name. Cancel it
        to leave the line."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._lines[priority].append(future)
        return future

    def grant(self, reserve: Callable[[], str | None]) -> int:
        """Reserve runners for the waiters at the head of the lines, highest priority first,
        while ``reserve`` finds one; returns how many were served."""
        served = 0
        for p in PRIORITIES:
            line = self._lines[p]
            while self._live(line):
                name = reserve()
                if name is None:
                    return served
                line.popleft().set_result(name)
                served += 1
        return served

    def waiting(self) -> int:
        return sum(1 for line in self._lines.values() for f in line if not f.done())

    @staticmethod
    def _live(line: deque[asyncio.Future[str]]) -> bool:
        while line and line[0].done():  # left the line (cancelled)
            line.popleft()
        return bool(line)
