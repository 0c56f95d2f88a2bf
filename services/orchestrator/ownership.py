"""Which partitions an orchestrator should take and which it should give away, from what
the leases bucket shows: pure, so every case is tested directly
(tests/unit/orchestrator/test_ownership.py).

Every orchestrator computes the same assignment from the same view (the live members,
sorted, dealt the partitions in turn), and moves only towards it:

- it takes a partition assigned to it that nobody holds, or whose holder is gone (silent
  for the lease's time, or an earlier life of itself);
- it gives away a partition it holds that is assigned to another live member, which will
  take it once it is free;
- it frees a partition assigned to another member whose key names it but that it does not
  act on (an earlier life's, or a give whose delete was lost): the others take its name for
  a live holder, so nobody else may;
- it never takes a partition from a live holder: two views that disagree for a moment make
  a partition wait, never two owners (acquiring is a compare-and-set besides).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a partition: a member's name and the life (process) of it that took it."""

    name: str
    life: str


@dataclass(frozen=True, slots=True)
class Moves:
    take: frozenset[int]
    give: frozenset[int]
    free: frozenset[int] = frozenset()  # keys of its name it does not act on: deleted


def assignment(members: Iterable[str], partitions: int) -> dict[int, str]:
    """Partition -> member: the sorted members dealt the partitions in turn."""
    ordered = sorted(set(members))
    if not ordered:
        return {}
    return {p: ordered[p % len(ordered)] for p in range(partitions)}


def moves(
    me: Holder, alive: Iterable[str], holders: Mapping[int, Holder], partitions: int
) -> Moves:
    """What ``me`` should do next. ``alive`` are the members heard within the lease's time
    (``me`` counts as alive whatever it says); ``holders`` the partitions' current holders."""
    live = set(alive) | {me.name}
    target = assignment(live, partitions)
    take, give, free = set(), set(), set()
    for p in range(partitions):
        holder = holders.get(p)
        mine = holder == me
        if target[p] == me.name:
            if not mine and (holder is None or not live_holder(holder, me, live)):
                take.add(p)
        elif mine:
            give.add(p)
        elif holder is not None and holder.name == me.name:
            free.add(p)
    return Moves(frozenset(take), frozenset(give), frozenset(free))


def live_holder(holder: Holder, me: Holder, live: set[str]) -> bool:
    """A holder that may still act: a live member, other than an earlier life of ``me``."""
    if holder.name == me.name:
        return False  # my name, another life: that process is gone (names are unique)
    return holder.name in live
