"""The pool's runners in turn, and which of them are idle. Pure: no I/O.

Each registered runner holds a turn, a number drawn when it registers and again each time it
is given a step, so the least recently used holds the lowest. The idle ones (no lease, no
assignment on its way) are listed by turn: a dispatcher looks for a free runner among them
alone, so what it does for a step does not grow with the pool (bench/pool_scale.py).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator


class Turns:
    def __init__(self) -> None:
        self._turn: dict[str, int] = {}
        self._draw = itertools.count()
        self._idle: list[str] = []  # by turn
        self._listed: set[str] = set()  # the same, to tell at once whether one is there

    def __iter__(self) -> Iterator[str]:
        """The idle runners, least recently used first."""
        return iter(self._idle)

    def idle_count(self) -> int:
        return len(self._idle)

    def idle(self, name: str) -> bool:
        """Whether ``name`` is listed as idle."""
        return name in self._listed

    def join(self, name: str) -> None:
        """A runner registered, last in turn; idle once ``settle`` says so."""
        if name not in self._turn:
            self._turn[name] = next(self._draw)

    def leave(self, name: str) -> None:
        if name in self._turn:
            self.settle(name, idle=False)
            del self._turn[name]

    def used(self, name: str) -> None:
        """``name`` was given a step: it is no longer idle, and goes to the back of the line."""
        if name in self._turn:
            self.settle(name, idle=False)
            self._turn[name] = next(self._draw)

    def settle(self, name: str, idle: bool) -> None:
        """``name`` listed as idle, or not, in its turn's place."""
        if (name in self._listed) == idle or name not in self._turn:
            return
        at = bisect.bisect_left(self._idle, self._turn[name], key=self._turn.__getitem__)
        if idle:
            self._idle.insert(at, name)
            self._listed.add(name)
        else:
            del self._idle[at]
            self._listed.discard(name)
