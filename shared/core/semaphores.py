"""Semaphores steps hold (docs/pools.md, "Semaphores"): every change to one semaphore's
document (``Semaphore`` in heddle-semaphores), decided here and written by compare-and-set.

A semaphore is a line of slots (slot_lines.py) whose entries are steps, told apart by run
and step: a step takes a slot when one is free and no step waits ahead of it, and never
holds two slots of one semaphore. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import msgspec
from heddle.shared.core import slot_lines
from heddle.shared.core.slot_lines import Line
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


def _line(sem: Semaphore) -> Line[SemaphoreHolder]:
    return Line(sem.size, sem.holders, sem.waiting)


def _of(sem: Semaphore, line: Line[SemaphoreHolder]) -> Semaphore:
    return msgspec.structs.replace(sem, holders=line.holders, waiting=line.waiting)


def free_slots(sem: Semaphore) -> int:
    """Slots no step holds: none while more hold it than its size (it was made smaller)."""
    return slot_lines.free_slots(_line(sem))


def over(sem: Semaphore) -> int:
    """How many more steps hold it than its size allows (after a smaller size)."""
    return max(len(sem.holders) - sem.size, 0)


def holds(sem: Semaphore, run_id: str, step_id: str) -> bool:
    return any(key_of(h) == (run_id, step_id) for h in sem.holders)


def due(sem: Semaphore) -> list[SemaphoreHolder]:
    """The waiting steps whose turn it is: the first ones, as many as there are free slots."""
    return slot_lines.due(_line(sem))


def take(sem: Semaphore, taker: SemaphoreHolder) -> tuple[Semaphore, bool]:
    """``taker`` takes a slot (True) or waits in line (False), with attempt 0. Taking again
    what it holds, or waiting again where it waits, changes nothing."""
    line, granted = slot_lines.take(
        _line(sem), taker, key_of, lambda t: msgspec.structs.replace(t, attempt=0)
    )
    return _of(sem, line), granted


def give_back(sem: Semaphore, run_id: str, step_id: str) -> Semaphore:
    """The step holds no slot and waits for none any more (its slot, if any, is free)."""
    return _of(sem, slot_lines.give_back(_line(sem), (run_id, step_id), key_of))


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
    line = slot_lines.reconcile(
        _line(sem),
        key_of,
        lambda e: owned(e.run_id),
        holding,
        waiting,
        must_hold,
    )
    return _of(sem, line)


def stale_holders(
    sem: Semaphore, owned: Callable[[str], bool], holding: set[StepKey]
) -> list[SemaphoreHolder]:
    """The holders of runs ``owned`` whose step no longer runs (not in ``holding``)."""
    return [h for h in sem.holders if owned(h.run_id) and key_of(h) not in holding]
