"""Semaphores steps hold (docs/pools.md, "Semaphores"): every change to one semaphore's
document (``Semaphore`` in heddle-semaphores), decided here and written by compare-and-set.

A step takes a slot when its slot is free and no step waits ahead of it: the free slots go
to the waiting steps in their order. Everything is keyed by run and step, so doing a change
again (a write retried after its answer was lost) changes nothing: a step never holds two
slots of one semaphore. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import msgspec
from heddle.shared.wire.contracts import Semaphore, SemaphoreHolder

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_SIZE = 1  # an unknown semaphore's
StepKey = tuple[str, str]  # run id, step id


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a semaphore, if it cannot."""
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        return f"semaphore name {name!r} must be 1 to 64 letters, digits, '_' or '-'"
    return None


def size_problem(size: object) -> str | None:
    """Why ``size`` cannot be a semaphore's size, if it cannot."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        return f"size must be an integer of at least 1, not {size!r}"
    return None


def key_of(entry: SemaphoreHolder) -> StepKey:
    return entry.run_id, entry.step_id


def free_slots(sem: Semaphore) -> int:
    """Slots no step holds: none while more hold it than its size (it was made smaller)."""
    return max(sem.size - len(sem.holders), 0)


def over(sem: Semaphore) -> int:
    """How many more steps hold it than its size allows (after a smaller size)."""
    return max(len(sem.holders) - sem.size, 0)


def holds(sem: Semaphore, run_id: str, step_id: str) -> bool:
    return any(key_of(h) == (run_id, step_id) for h in sem.holders)


def due(sem: Semaphore) -> list[SemaphoreHolder]:
    """The waiting steps whose turn it is: the first ones, as many as there are free slots."""
    return sem.waiting[: free_slots(sem)]


def take(sem: Semaphore, taker: SemaphoreHolder) -> tuple[Semaphore, bool]:
    """``taker`` takes a slot (True) or waits in line (False). Taking again what it holds,
    or waiting again where it waits, changes nothing."""
    key = key_of(taker)
    if any(key_of(h) == key for h in sem.holders):
        return sem, True
    place = next((i for i, w in enumerate(sem.waiting) if key_of(w) == key), None)
    ahead = len(sem.waiting) if place is None else place
    if ahead < free_slots(sem):
        rest = [w for w in sem.waiting if key_of(w) != key]
        return msgspec.structs.replace(sem, holders=[*sem.holders, taker], waiting=rest), True
    if place is not None:
        return sem, False
    waiter = msgspec.structs.replace(taker, attempt=0)
    return msgspec.structs.replace(sem, waiting=[*sem.waiting, waiter]), False


def give_back(sem: Semaphore, run_id: str, step_id: str) -> Semaphore:
    """The step holds no slot and waits for none any more (its slot, if any, is free)."""
    key = (run_id, step_id)
    return msgspec.structs.replace(
        sem,
        holders=[h for h in sem.holders if key_of(h) != key],
        waiting=[w for w in sem.waiting if key_of(w) != key],
    )


def resize(sem: Semaphore, size: int) -> Semaphore:
    """A new size. A smaller one frees nothing early: the holders keep their slots, and
    the next taker waits until fewer than ``size`` hold it."""
    return msgspec.structs.replace(sem, size=size)


def reconcile(
    sem: Semaphore,
    owned: Callable[[str], bool],
    holding: set[StepKey],
    waiting: set[StepKey],
    must_hold: Iterable[SemaphoreHolder],
) -> Semaphore:
    """The semaphore as the runs an orchestrator has just rebuilt say it is. Of the runs
    ``owned`` (by run id) only: a holder is kept if its step is in ``holding`` (queued or
    running), a waiter if its step is in ``waiting`` (pending, waiting for this one), the
    others are stale and given back; each step of ``must_hold`` not holding it takes a slot,
    whatever the size (it runs already). The other runs' entries are left as they are."""
    holders = [h for h in sem.holders if not owned(h.run_id) or key_of(h) in holding]
    queued = [w for w in sem.waiting if not owned(w.run_id) or key_of(w) in waiting]
    held = {key_of(h) for h in holders}
    for holder in must_hold:
        if key_of(holder) not in held:
            holders.append(holder)
            held.add(key_of(holder))
    queued = [w for w in queued if key_of(w) not in held]
    return msgspec.structs.replace(sem, holders=holders, waiting=queued)


def stale_holders(
    sem: Semaphore, owned: Callable[[str], bool], holding: set[StepKey]
) -> list[SemaphoreHolder]:
    """The holders of runs ``owned`` whose step no longer runs (not in ``holding``)."""
    return [h for h in sem.holders if owned(h.run_id) and key_of(h) not in holding]
