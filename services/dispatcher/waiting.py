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
front of another pool's. Where runners are restricted to namespaces (docs/namespaces.md), a
free runner wakes only a waiter of a namespace it serves, each waiter in turn taking one it
may use, so a step of a namespace no free runner serves never stands in front of the others.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from heddle.shared.core.namespaces import namespace_of


@dataclass(frozen=True, slots=True)
class Turn:
    """What places a waiting step in line."""

    run_id: str
    priority: int = 0
    opening: bool = False
    arrival: int = 0


Loads = Callable[[], Counter[str]]  # the runners each run holds now
# The namespaces each free runner of a label key serves (None: every one); None while no
# runner is restricted to namespaces (pool.py, ``serving``).
Serving = Sequence[frozenset[str] | None]
Competes = Callable[[Turn], bool]  # whether a waiter may use the runner a step would take


def rank(turn: Turn, loads: Counter[str]) -> tuple[int, int, bool, int]:
    return -turn.priority, loads[turn.run_id], turn.opening, turn.arrival


def no_loads() -> Counter[str]:
    return Counter()


def no_restriction(key: str) -> Serving | None:
    return None


def fits(turn: Turn, served: frozenset[str] | None) -> bool:
    return served is None or namespace_of(turn.run_id) in served


class WaitingLine:
    """The lines of every label key; "" is the default pool's."""

    def __init__(
        self, loads: Loads = no_loads, serving: Callable[[str], Serving | None] = no_restriction
    ) -> None:
        self._lines: dict[str, KeyLine] = {}
        self._loads = loads
        self._serving = serving
        self._closed = False

    def __len__(self) -> int:
        """Waiters not woken yet."""
        return sum(len(line) for line in self._lines.values())

    @property
    def awake(self) -> int:
        return sum(line.awake for line in self._lines.values())

    def ahead(self, key: str, turn: Turn, competes: Competes | None = None) -> bool:
        """Whether a step waiting for a runner of ``key``, woken or not, goes before
        ``turn`` (of those that ``competes`` for its runner); a step that finds a free
        runner leaves it to that one."""
        line = self._lines.get(key)
        return line is not None and line.ahead(turn, competes)

    def unfit(self, key: str, opening: bool) -> int:
        """Waiters of ``key`` (opening a run or not) that no free runner may take, for their
        namespace: they hold no credit of their lane (app.py), so the steps behind them in
        the stream still come to the runners that may take them."""
        line = self._lines.get(key)
        serving = self._serving(key) if line else None
        return 0 if line is None or serving is None else line.unfit(opening, serving)

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
        return sum(
            line.wake(free.get(key, 0), self._serving(key))
            for key, line in self._lines.items()
            if line
        )

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

    def ahead(self, turn: Turn, competes: Competes | None = None) -> bool:
        if not self._waiting and not self._woken:
            return False
        loads = self._loads()
        mine = rank(turn, loads)
        turns = [*(w.turn for w in self._waiting), *self._woken]
        return any(rank(t, loads) < mine and (competes is None or competes(t)) for t in turns)

    def unfit(self, opening: bool, serving: Serving) -> int:
        return sum(
            1
            for w in self._waiting
            if w.turn.opening == opening and not any(fits(w.turn, s) for s in serving)
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

    def wake(self, free: int, serving: Serving | None = None) -> int:
        """Wake waiters in turn until ``free`` are awake; how many this call woke. With
        ``serving`` (runners restricted to namespaces), each waiter in turn takes a free
        runner that serves its namespace, those awake first, and one with none stays."""
        if serving is not None:
            return self._wake_fitting(list(serving))
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

    def _wake_fitting(self, runners: list[frozenset[str] | None]) -> int:
        # The runners restricted to namespaces are given first: one that serves every
        # namespace is kept for a waiter that no other fits.
        runners.sort(key=lambda served: served is None)

        def take(turn: Turn) -> bool:
            for i, served in enumerate(runners):
                if fits(turn, served):
                    del runners[i]
                    return True
            return False

        for turn in self._woken:
            take(turn)
        loads = self._loads()
        woken = 0
        for waiter in sorted(self._waiting, key=lambda w: rank(w.turn, loads)):
            if not runners:
                break
            if take(waiter.turn):
                self._waiting.remove(waiter)
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
