"""A limited number of slots, the entries holding them and those waiting for one in line:
the logic a semaphore's steps (semaphores.py) and a concurrency key's runs (concurrency.py)
share. Pure: no I/O, no clock.

An entry takes a slot when one is free and no entry waits ahead of it: the free slots go to
the waiting entries in their order. Entries are told apart by their key (``key_of``), so
doing a change again (a write retried after its answer was lost) changes nothing: an entry
never holds two slots of one line.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

E = TypeVar("E")
KeyOf = Callable[[E], Hashable]


@dataclass(frozen=True)
class Line(Generic[E]):
    size: int
    holders: list[E]
    waiting: list[E]


def free_slots(line: Line[E]) -> int:
    """Slots no entry holds: none while more hold one than the size (it was made smaller)."""
    return max(line.size - len(line.holders), 0)


def due(line: Line[E]) -> list[E]:
    """The waiting entries whose turn it is: the first ones, as many as there are free slots."""
    return line.waiting[: free_slots(line)]


def take(
    line: Line[E], taker: E, key_of: KeyOf[E], as_waiter: Callable[[E], E] = lambda e: e
) -> tuple[Line[E], bool]:
    """``taker`` takes a slot (True) or waits in line (False), as ``as_waiter(taker)``.
    Taking again what it holds, or waiting again where it waits, changes nothing."""
    key = key_of(taker)
    if any(key_of(h) == key for h in line.holders):
        return line, True
    place = next((i for i, w in enumerate(line.waiting) if key_of(w) == key), None)
    ahead = len(line.waiting) if place is None else place
    if ahead < free_slots(line):
        rest = [w for w in line.waiting if key_of(w) != key]
        return replace(line, holders=[*line.holders, taker], waiting=rest), True
    if place is not None:
        return line, False
    return replace(line, waiting=[*line.waiting, as_waiter(taker)]), False


def give_back(line: Line[E], key: Hashable, key_of: KeyOf[E]) -> Line[E]:
    """The entry ``key`` holds no slot and waits for none any more (its slot, if any, is free)."""
    return replace(
        line,
        holders=[h for h in line.holders if key_of(h) != key],
        waiting=[w for w in line.waiting if key_of(w) != key],
    )


def reconcile(
    line: Line[E],
    key_of: KeyOf[E],
    owned: Callable[[E], bool],
    holding: AbstractSet[Hashable],
    waiting: AbstractSet[Hashable],
    must_hold: Iterable[E],
) -> Line[E]:
    """The line as the entries an orchestrator has just rebuilt say it is. Of the entries
    ``owned`` only: a holder is kept if its key is in ``holding``, a waiting entry if its key
    is in ``waiting``, the others are stale and given back; each of ``must_hold`` not holding
    a slot takes one, whatever the size (it runs already). The others are left as they are."""
    holders = [h for h in line.holders if not owned(h) or key_of(h) in holding]
    queued = [w for w in line.waiting if not owned(w) or key_of(w) in waiting]
    held = {key_of(h) for h in holders}
    for holder in must_hold:
        if key_of(holder) not in held:
            holders.append(holder)
            held.add(key_of(holder))
    queued = [w for w in queued if key_of(w) not in held]
    return replace(line, holders=holders, waiting=queued)
