"""When to grow or shrink the runner pool. Pure: no I/O, no clock (``now`` is given).

The pool is a StatefulSet's: runners are numbered by ordinal, ``replicas`` of them are wanted
(ordinals ``0 .. replicas-1``), and shrinking removes the highest ordinals. So a runner is
only ever removed from the top, and only when it holds nothing:

- **Up** when a ready step has waited ``up_after`` seconds with no runner free: one runner
  more for every step waiting, less the runners asked for that have not registered yet
  (within ``start_timeout``: they are coming), never past ``maximum``. Below ``minimum``:
  up to it.
- **Down** when nothing waits and runners have been idle ``idle_after`` seconds (a runner
  asked for and not registered yet is not idle before ``start_timeout``): as many
  runners as are idle that long (never below ``minimum``) are **drained**, always the highest
  ordinals, whichever runners the idle ones are: a draining runner is given no new step.
  The top ordinals that are drained and hold nothing are then removed, at once; a draining
  runner still running a step keeps its place (and those below it theirs) until the step
  ends. Ordinals at or above ``maximum`` are drained whatever their idle time.
- A ready step waiting while runners drain takes them back (**undrain**), at once: they are
  still there.

The dispatcher (services/dispatcher/autoscaling.py) feeds it its pool and its waiting steps,
applies the decision to the scale subresource, and gives no step to a draining runner, nor to
one whose ordinal is at or above ``replicas`` (a pod on its way out).

With runner pools (``HEDDLE_RUNNER_POOLS``) each pool with autoscaling is scaled on its own:
its StatefulSets (``<its prefix><ordinal>``), its limits, its runners (``pool_members``) and
its own demand (the steps its runners could take), decided by ``decide`` as one pool alone
(``scaled_pools``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from heddle.shared.core.labels import DEFAULT_POOL
from heddle.shared.core.runner_pools import PoolSpec

Action = Literal["hold", "up", "down", "drain", "undrain"]


@dataclass(frozen=True, slots=True)
class Limits:
    minimum: int
    maximum: int
    up_after: float  # seconds a ready step waits, every runner busy, before the pool grows
    idle_after: float  # seconds a runner is idle before the pool may lose one
    start_timeout: float  # seconds a runner asked for counts as coming though not registered


@dataclass(frozen=True, slots=True)
class Runner:
    ordinal: int
    registered: bool  # in the registry
    busy: bool  # holds a lease, or an assignment is on its way to it
    since: float  # when it was last busy (or asked for, or left the registry): its idle start


@dataclass(frozen=True, slots=True)
class View:
    replicas: int  # wanted now: ordinals 0 .. replicas-1
    # By ordinal, every one below ``replicas`` (one left out counts as just asked for), and
    # those above it still registered.
    runners: tuple[Runner, ...]
    waits: tuple[float, ...] = ()  # seconds each ready step in hand has waited for a runner
    waiting: int = 0  # ready steps not given to a runner: those in hand and in the stream
    draining: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    replicas: int
    draining: frozenset[int]
    reason: str = ""

    @property
    def changes_scale(self) -> bool:
        return self.action in ("up", "down")


def decide(view: View, limits: Limits, now: float) -> Decision:
    """What to do with the pool now."""
    n = view.replicas
    runners = {r.ordinal: r for r in view.runners}
    draining = frozenset(o for o in view.draining if o < n)
    waiting = max(view.waiting, len(view.waits))
    if n < limits.minimum:
        return Decision("up", limits.minimum, frozenset(), f"below the minimum of {limits.minimum}")
    # Ordinals past the maximum go whatever their idle time: drained, removed once free.
    forced = frozenset(range(limits.maximum, n))
    if waiting and draining - forced:
        kept = draining & forced
        return Decision(
            "undrain",
            n,
            kept,
            f"{waiting} ready step(s) waiting: draining runners {_ordinals(draining - kept)} kept",
        )
    grown = _grow(view, limits, now, runners, draining, waiting)
    if grown is not None:
        return grown
    return _shrink(n, limits, now, runners, draining, forced, waiting)


def _grow(
    view: View,
    limits: Limits,
    now: float,
    runners: dict[int, Runner],
    draining: frozenset[int],
    waiting: int,
) -> Decision | None:
    """Up, when a step has waited long enough with every runner busy; else None."""
    n = view.replicas
    oldest = max(view.waits, default=0.0)
    if oldest >= limits.up_after and n < limits.maximum and waiting:
        free = [
            o
            for o in range(n)
            if (r := runners.get(o)) is not None
            and r.registered
            and not r.busy
            and o not in draining
        ]
        coming = [
            o
            for o in range(n)
            if ((r := runners.get(o)) is None or not r.registered)
            and now - (r.since if r is not None else now) < limits.start_timeout
        ]
        add = min(waiting - len(coming), limits.maximum - n)
        if not free and add > 0:
            return Decision(
                "up",
                n + add,
                draining,
                f"{waiting} ready step(s) waiting, the oldest {oldest:.1f} s, every runner "
                f"busy" + (f", {len(coming)} coming" if coming else ""),
            )
    return None


def _shrink(
    n: int,
    limits: Limits,
    now: float,
    runners: dict[int, Runner],
    draining: frozenset[int],
    forced: frozenset[int],
    waiting: int,
) -> Decision:
    """Drain idle runners from the top, and remove the drained ones that hold nothing."""
    want = draining | forced
    why = f"above the maximum of {limits.maximum}" if forced - draining else ""
    if not waiting and n > limits.minimum:
        idle = [
            o
            for o in range(n)
            if o not in want and _idle_for(runners.get(o), now, limits) >= limits.idle_after
        ]
        more = min(len(idle), n - limits.minimum - len(want))
        if more > 0:
            top = sorted((o for o in range(n) if o not in want), reverse=True)[:more]
            want = want | frozenset(top)
            why = f"{len(idle)} runner(s) idle {limits.idle_after:g} s or more"
    # Remove the top ordinals that are drained and hold nothing.
    keep = n
    while keep > limits.minimum and keep - 1 in want and not _busy(runners.get(keep - 1)):
        keep -= 1
    left = frozenset(o for o in want if o < keep)
    if keep < n:
        reason = why or "drained runners free"
        return Decision("down", keep, left, f"{reason}: removing {_ordinals(range(keep, n))}")
    if left != draining:
        return Decision("drain", n, left, f"{why}: draining {_ordinals(left - draining)}")
    return Decision("hold", n, draining)


@dataclass(frozen=True, slots=True)
class Scaled:
    """One pool the dispatcher scales: its name, its StatefulSets' prefix, its limits."""

    pool: str
    prefix: str
    limits: Limits


def scaled_pools(pools: Sequence[PoolSpec], single: Limits, prefix: str) -> tuple[Scaled, ...]:
    """A scaler for each pool with autoscaling, its bounds its own and the timings shared;
    no pools listed: the default pool alone, with ``single`` and ``prefix`` (the
    HEDDLE_AUTOSCALE_* settings)."""
    if not pools:
        return (Scaled(DEFAULT_POOL, prefix, single),)
    return tuple(
        Scaled(
            p.name, p.statefulset, replace(single, minimum=p.min_replicas, maximum=p.max_replicas)
        )
        for p in pools
        if p.autoscaling
    )


def waiting_of(waits: tuple[float, ...], pending: int | None) -> int:
    """A pool's ready steps not given to a runner: those in hand, and those the stream holds
    for it (None: not known) counted only while some in hand wait, as they show every runner
    busy; with none in hand the pool is idle, whatever a stale backlog said."""
    return len(waits) + (pending or 0) if waits else 0


def pool_members(names: Iterable[str], prefix: str) -> dict[int, str]:
    """The runners of one pool's StatefulSets among ``names``, by ordinal."""
    return {o: name for name in names if (o := ordinal_of(name, prefix)) is not None}


def pack_key(name: str, prefixes: Iterable[str]) -> int:
    """Where a free runner stands in line for a step: its ordinal in its own pool's
    StatefulSets, so that each pool's top ordinals fall idle; one of no scaled pool first
    (it costs the scaled pools nothing)."""
    for prefix in prefixes:
        o = ordinal_of(name, prefix)
        if o is not None:
            return o
    return -1


def leasable(ordinal: int, replicas: int, draining: frozenset[int]) -> bool:
    """Whether the dispatcher may give a step to the runner of this ordinal: not one being
    drained, nor one past the wanted replicas (its pod is on its way out)."""
    return ordinal < replicas and ordinal not in draining


def ordinal_of(runner: str, prefix: str) -> int | None:
    """A runner's ordinal from its name (``runner-3`` with prefix ``runner-`` -> 3); None for
    a runner that is not one of the scaled pool's."""
    if not runner.startswith(prefix):
        return None
    rest = runner[len(prefix) :]
    if not rest.isdigit() or (len(rest) > 1 and rest[0] == "0"):
        return None
    return int(rest)


def _busy(r: Runner | None) -> bool:
    return r is not None and r.busy


def _idle_for(r: Runner | None, now: float, limits: Limits) -> float:
    if r is None or r.busy:  # None: not known yet, as if just asked for
        return 0.0
    if not r.registered and now - r.since < limits.start_timeout:
        return 0.0  # coming
    return now - r.since


def _ordinals(ordinals: Iterable[int]) -> str:
    return ",".join(str(o) for o in sorted(ordinals))
