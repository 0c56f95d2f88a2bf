"""The ready steps in a dispatcher's hand that wait for a free runner, in turn. No I/O.

A runner that frees up wakes one waiter, not all of them: ``wake(free)`` wakes waiters in
turn until as many are awake as there are free runners, since in a saturated pool every
other waiter woken would only look, find no runner and wait again (docs/performance.md).

The turn (docs/pools.md, "Fair turns"): the higher priority first; then the step of the run
that holds the fewest runners now, so that free runners go to runs in turn and a big run
cannot starve a small one; then a step of a run under way before one that opens a run
(docs/bursts.md); then arrival. A waiter that finds no runner after all (another step took
it first) waits again, keeping its arrival.

Steps wait by the label key they ask for (shared/core/labels.py), each key a line of its own
woken by the free runners that serve it: a step waiting for a busy pool never stands in
front of another pool's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Turn:
    """What places a waiting step in line."""

    run_id: str
    priority: int = 0
    opening: bool = False
    arrival: int = 0


Loads = Callable[[], Counter[str]]  # the runners each run holds now


def rank(turn: Turn, loads: Counter[str]) -> tuple[int, int, bool, int]:
    return -turn.priority, loads[turn.run_id], turn.opening, turn.arrival


def no_loads() -> Counter[str]:
    return Counter()


class WaitingLine:
    """The lines of every label key; "" is the default pool's."""

    def __init__(self, loads: Loads = no_loads) -> None:
        self._lines: dict[str, KeyLine] = {}
        self._loads = loads
        self._closed = False

    def __len__(self) -> int:
        """Waiters not woken yet."""
        return sum(len(line) for line in self._lines.values())

    @property
    def awake(self) -> int:
        return sum(line.awake for line in self._lines.values())

    def ahead(self, key: str, turn: Turn) -> bool:
        """Whether a step waiting for a runner of ``key``, woken or not, goes before
        ``turn``: a step that finds a free runner leaves it to that one."""
        line = self._lines.get(key)
        return line is not None and line.ahead(turn)

    def line(self, key: str = "") -> KeyLine:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = KeyLine(self._loads)
            if self._closed:
                line.close()
        return line

    async def wait(self, timeout: float, turn: Turn, key: str = "") -> bool:
        """Until this waiter is woken (True), or ``timeout`` seconds (False)."""
        return await self.line(key).wait(timeout, turn)

    def wake(self, free: Mapping[str, int]) -> int:
        """Wake waiters of each key until as many are awake as free runners serve it."""
        return sum(line.wake(free.get(key, 0)) for key, line in self._lines.items() if line)

    def close(self) -> None:
        """Wake every waiter, and let none wait from now on (the dispatcher stops)."""
        self._closed = True
        for line in self._lines.values():
            line.close()


@dataclass(slots=True)
class _Waiter:
    turn: Turn
    fut: asyncio.Future[bool] = field(compare=False)


class KeyLine:
    """The waiters of one label key, woken in turn."""

    def __init__(self, loads: Loads = no_loads) -> None:
        self._waiting: list[_Waiter] = []  # not woken yet
        self._woken: list[Turn] = []  # woken, not yet resumed: each about to take a runner
        self._loads = loads
        self._closed = False

    def __len__(self) -> int:
        """Waiters not woken yet."""
        return len(self._waiting)

    @property
    def awake(self) -> int:
        return len(self._woken)

    def ahead(self, turn: Turn) -> bool:
        if not self._waiting and not self._woken:
            return False
        loads = self._loads()
        mine = rank(turn, loads)
        return any(rank(w.turn, loads) < mine for w in self._waiting) or any(
            rank(t, loads) < mine for t in self._woken
        )

    async def wait(self, timeout: float, turn: Turn) -> bool:
        """Until this waiter is woken (True), or ``timeout`` seconds (False). A closed line
        does not wait."""
        if self._closed:
            return True
        loop = asyncio.get_running_loop()
        waiter = _Waiter(turn, loop.create_future())
        self._waiting.append(waiter)
        timer = loop.call_later(timeout, _expire, waiter.fut)
        try:
            woken = await waiter.fut
        except asyncio.CancelledError:
            if waiter.fut.done() and not waiter.fut.cancelled() and waiter.fut.result():
                self._resumed(turn)
                self.wake(len(self._woken) + 1)  # the wake meant for it goes to the next
            else:
                self._forget(waiter)
            raise
        finally:
            timer.cancel()
        if woken:
            self._resumed(turn)
        else:
            self._forget(waiter)
        return woken

    def wake(self, free: int) -> int:
        """Wake waiters in turn until ``free`` are awake; how many this call woke."""
        woken = 0
        if len(self._woken) >= free or not self._waiting:
            return woken
        loads = self._loads()
        while len(self._woken) < free and self._waiting:
            best = min(range(len(self._waiting)), key=lambda i: rank(self._waiting[i].turn, loads))
            waiter = self._waiting.pop(best)
            if not waiter.fut.done():
                waiter.fut.set_result(True)
                self._woken.append(waiter.turn)
                woken += 1
        return woken

    def close(self) -> None:
        """Wake every waiter, and let none wait from now on (the dispatcher stops)."""
        self._closed = True
        self.wake(len(self._woken) + len(self._waiting))

    def _resumed(self, turn: Turn) -> None:
        self._woken.remove(turn)

    def _forget(self, waiter: _Waiter) -> None:
        try:
            self._waiting.remove(waiter)
        except ValueError:
            pass


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
