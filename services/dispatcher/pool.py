"""The dispatcher's view of the runner pool, and its leases. Pure: no I/O.

A runner is free when it is in the registry and the dispatcher holds no lease on it (the
registry's own busy/idle is refreshed lazily; leases are the truth, and a runner refuses an
assignment while busy anyway). A lease starts when a runner accepts an assignment and ends
when that attempt's finished event arrives (even one that overtook the acceptance reply),
when the registry shows the runner idle after having accepted it (its ``jobs`` counter
reached the lease's), when a new process registers under the same name (a restarted pod),
or when the runner leaves the pool.

Each runner serves some sets of labels (its ``keys``): the default pool's steps ("", for
a runner of the pool ``default``) and every set of its labels a step's runsOn may name. A
runner restricted to namespaces (``namespaces``) is free only for those namespaces' steps;
while none is, no look-up is made for them (docs/namespaces.md).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass

from heddle.services.dispatcher.turns import Turns
from heddle.shared.core.labels import DEFAULT_POOL, runner_labels, served_keys
from heddle.shared.wire.contracts import RunnerInfo


def keys_of(pool: str, labels: Sequence[str]) -> frozenset[str]:
    """The label keys a runner of ``pool`` with ``labels`` serves: "" (the default pool's
    steps) if it is of that pool, and every set of its labels, by key (shared/core/labels.py;
    the default pool's name alone is its "")."""
    keys = set(served_keys(runner_labels(pool, labels))) - {DEFAULT_POOL}
    if pool == DEFAULT_POOL:
        keys.add("")
    return frozenset(keys)


@dataclass(frozen=True, slots=True)
class Lease:
    runner: str
    run_id: str
    step_id: str
    attempt: int
    jobs: int  # the runner's job count once it accepted this assignment


class Pool:
    def __init__(
        self, suspect_for: float = 5.0, pack: Callable[[str], float] | None = None
    ) -> None:
        self.runners: dict[str, RunnerInfo] = {}
        self.keys: dict[str, frozenset[str]] = {}  # by runner, the label keys it serves
        # By runner restricted to namespaces (no other is listed), the only ones it serves.
        self.namespaces: dict[str, frozenset[str]] = {}
        self.generation = 0  # counts the changes to ``keys``: new lanes may be needed
        self._served: tuple[int, frozenset[str]] = (-1, frozenset())
        self._all_default = True  # every runner serves the default pool's steps
        # With ``pack`` (the autoscaler's: a runner's ordinal), a step goes to the free runner
        # of the lowest key rather than round robin, so that the top ordinals, the ones a
        # StatefulSet removes, are the ones left idle.
        self.pack = pack
        # Given no step: drained, or on their way out (the autoscaler's view, asked each time).
        self.set_aside: Container[str] = frozenset()
        self.reserved_at: dict[str, float] = {}  # monotonic, of each runner's last step
        self.leases: dict[str, Lease] = {}
        self.reserved: set[str] = set()  # assignment in flight
        self._suspect_until: dict[str, float] = {}
        self.suspect_for = suspect_for
        self._turns = Turns()  # the idle runners by turn, least recently used first
        self._released_jobs: dict[str, int] = {}
        # Finished events that overtook the runner's acceptance reply: runner -> attempt,
        # and the continuation it went on to ("" if none).
        self._early: dict[str, tuple[str, str, int, str]] = {}

    def update(self, info: RunnerInfo) -> None:
        known = self.runners.get(info.name)
        if known is None:
            self._turns.join(info.name)
        elif (known.pid, known.started_at) != (info.pid, info.started_at):
            # Same name, new process (a restarted pod): nothing of the old one holds.
            self.leases.pop(info.name, None)
            self._released_jobs.pop(info.name, None)
            self._early.pop(info.name, None)
        self.runners[info.name] = info
        if info.namespaces:
            self.namespaces[info.name] = frozenset(info.namespaces)
        else:
            self.namespaces.pop(info.name, None)
        keys = keys_of(info.pool, info.labels)
        if self.keys.get(info.name) != keys:
            self.keys[info.name] = keys
            self.generation += 1
        lease = self.leases.get(info.name)
        if lease is not None and info.status == "idle" and info.jobs >= lease.jobs:
            del self.leases[info.name]
        if (
            info.status == "busy"
            and info.name not in self.leases
            and info.run_id
            and info.jobs > self._released_jobs.get(info.name, 0)
        ):
            # Busy with work leased before this dispatcher started.
            self.leases[info.name] = Lease(
                info.name, info.run_id, info.step_id or "", info.attempt or 0, info.jobs
            )
        self._settle(info.name)

    def remove(self, name: str) -> Lease | None:
        self._turns.leave(name)
        self.runners.pop(name, None)
        self.namespaces.pop(name, None)
        if self.keys.pop(name, None) is not None:
            self.generation += 1
        self.reserved.discard(name)
        self._suspect_until.pop(name, None)
        self._released_jobs.pop(name, None)
        self._early.pop(name, None)
        self.reserved_at.pop(name, None)
        return self.leases.pop(name, None)

    def _settle(self, name: str) -> None:
        """The idle list brought in line with ``name``'s lease and reservation now."""
        self._turns.settle(name, idle=not self.busy(name))

    def loads(self) -> Counter[str]:
        """How many runners each run holds now, by its leases (the fair turns' measure)."""
        return Counter(lease.run_id for lease in self.leases.values())

    def served(self) -> frozenset[str]:
        """Every label key some registered runner serves."""
        if self._served[0] != self.generation:
            self._served = (self.generation, frozenset().union(*self.keys.values()))
            self._all_default = all("" in keys for keys in self.keys.values())
        return self._served[1]

    def _filter(self, key: str | None) -> str | None:
        """The key to filter free runners by: none when every runner serves it (the default
        pool alone, the common case, costs no look-up per runner)."""
        if key == "" and (self.served() and self._all_default):
            return None
        return key

    def free(
        self, now: float | None = None, key: str | None = "", namespace: str | None = None
    ) -> list[str]:
        """The free runners that serve ``key`` (None: any), in the order they are given;
        with ``namespace``, those that take its steps, the ones restricted to it first (so
        that a runner that takes any namespace's steps is left to the others)."""
        free = list(self._free(now, key))
        if self.pack is not None:
            free.sort(key=self.pack)
        if namespace is not None and self.namespaces:
            free = [n for n in free if self._serves(n, namespace)]
            free.sort(key=lambda n: n not in self.namespaces)
        return free

    def _free(self, now: float | None, key: str | None) -> Iterator[str]:
        """The free runners that serve ``key`` (None: any), least recently used first."""
        now = time.monotonic() if now is None else now
        empty: frozenset[str] = frozenset()
        wanted = self._filter(key)
        suspect, set_aside = self._suspect_until, self.set_aside
        return (
            n
            for n in self._turns
            if (wanted is None or wanted in self.keys.get(n, empty))
            and n not in set_aside
            and suspect.get(n, 0.0) <= now
        )

    def _serves(self, name: str, namespace: str) -> bool:
        served = self.namespaces.get(name)
        return served is None or namespace in served

    def serving(self, key: str) -> list[frozenset[str] | None] | None:
        """The namespaces each free runner of ``key`` serves (None: every one); None while
        no runner is restricted to namespaces (waiting.py then counts free runners)."""
        if not self.namespaces:
            return None
        return [self.namespaces.get(n) for n in self.free(key=key)]

    def serves_any(self, key: str, namespace: str) -> bool:
        """Whether a registered runner of ``key``, free or not, takes ``namespace``'s steps."""
        wanted = self._filter(key)
        return any(
            (wanted is None or wanted in keys) and self._serves(n, namespace)
            for n, keys in self.keys.items()
        )

    def busy(self, name: str) -> bool:
        """It holds a lease, or an assignment is on its way to it."""
        return name in self.leases or name in self.reserved

    def any_free(
        self, key: str = "", now: float | None = None, namespace: str | None = None
    ) -> bool:
        """Whether a runner that serves ``key`` (and ``namespace``) is free, looked for until
        one is found."""
        if namespace is not None and self.namespaces:
            return bool(self.free(now, key, namespace))
        return next(self._free(now, key), None) is not None

    def free_by_key(self, now: float | None = None) -> dict[str, int]:
        """How many free runners serve each label key; one count while every runner is of
        the default pool with no other label (the common case, on every credit)."""
        if self.served() == {""}:
            return {"": self._free_count(now)}
        counts: dict[str, int] = {}
        for name in self.free(now, key=None):
            for key in self.keys.get(name, ()):
                counts[key] = counts.get(key, 0) + 1
        return counts

    def _free_count(self, now: float | None) -> int:
        """How many runners are free, every one serving the default pool alone: the idle
        ones less those set aside for a while, without a look at each idle runner unless an
        autoscaler sets some aside (it is asked runner by runner)."""
        if self.set_aside:
            return sum(1 for _ in self._free(now, None))
        now = time.monotonic() if now is None else now
        idle = self._turns
        return idle.idle_count() - sum(
            1 for n, until in self._suspect_until.items() if until > now and idle.idle(n)
        )

    def reserve(
        self, now: float | None = None, key: str = "", namespace: str | None = None
    ) -> str | None:
        if self.pack is None and (namespace is None or not self.namespaces):
            name = next(self._free(now, key), None)  # the first is taken: no list of all
        else:
            free = self.free(now, key, namespace)
            name = free[0] if free else None
        if name is None:
            return None
        self.reserved.add(name)
        self.reserved_at[name] = now if now is not None else time.monotonic()
        self._turns.used(name)  # round robin: the runner just taken goes to the back
        return name

    def reserve_again(self, name: str) -> bool:
        """``name`` reserved for the message it gave no answer about, whether free or not
        (it may hold that attempt); False if it is not in the pool."""
        if name not in self.runners:
            return False
        self.reserved.add(name)
        self._settle(name)
        return True

    def accepted(self, name: str, run_id: str, step_id: str, attempt: int, jobs: int) -> None:
        self.reserved.discard(name)
        early = self._early.pop(name, None)
        if early is not None and early[:3] == (run_id, step_id, attempt):
            # It finished before we heard it accepted: free, or on to its continuation.
            if early[3] and name in self.runners:
                self.leases[name] = Lease(name, run_id, early[3], 1, jobs + 1)
            else:
                self._released_jobs[name] = max(self._released_jobs.get(name, 0), jobs)
        elif name in self.runners:
            self.leases[name] = Lease(name, run_id, step_id, attempt, jobs)
        self._settle(name)

    def unreserve(self, name: str) -> None:
        """A reservation given up before its offer: the runner is free again."""
        self.reserved.discard(name)
        self.reserved_at.pop(name, None)
        self._settle(name)

    def refused(self, name: str, *, silent: bool, now: float | None = None) -> None:
        """A refusal (our view was stale: the runner is busy) sets it aside briefly; no
        answer at all sets it aside for longer, until the registry says it is gone."""
        self.reserved.discard(name)
        now = time.monotonic() if now is None else now
        self._suspect_until[name] = now + (self.suspect_for if silent else 0.2)
        self._settle(name)

    def release(
        self,
        name: str,
        run_id: str,
        step_id: str,
        attempt: int,
        continued: str = "",
        jobs: int = 0,
    ) -> bool:
        """An outcome from ``name``: its lease of that attempt ends, and it is no longer set
        aside (it refused because it was busy with what it just finished: a step the
        orchestrator handed it). Whether it may be free now: not if it went on to the
        step's continuation (``continued``), which it holds now. ``jobs``, the runner's count
        when it took the attempt (0: a runner that does not say): a registry entry of that
        count or less is older than this outcome, and leases nothing."""
        try:
            return self._release(name, run_id, step_id, attempt, continued, jobs)
        finally:
            self._settle(name)

    def _release(
        self, name: str, run_id: str, step_id: str, attempt: int, continued: str, jobs: int
    ) -> bool:
        if jobs:
            self._released_jobs[name] = max(self._released_jobs.get(name, 0), jobs)
        lease = self.leases.get(name)
        if lease and (lease.run_id, lease.step_id, lease.attempt) == (run_id, step_id, attempt):
            if continued:
                self.leases[name] = Lease(name, run_id, continued, 1, lease.jobs + 1)
                return False
            self._released_jobs[name] = max(self._released_jobs.get(name, 0), lease.jobs)
            del self.leases[name]
            self._suspect_until.pop(name, None)
            return True
        if name in self.reserved:
            self._early[name] = (run_id, step_id, attempt, continued)
        if continued:
            return False
        return self._suspect_until.pop(name, None) is not None and name not in self.leases
