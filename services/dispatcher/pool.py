"""The dispatcher's view of the runner pool, and its leases. Pure: no I/O.

A runner is free when the registry lists it idle and the dispatcher holds no lease on it.
A lease starts when a runner accepts an assignment and ends when that attempt's finished
event arrives, when the registry shows the runner idle after having accepted it (its
``jobs`` counter reached the lease's), or when the runner leaves the pool.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from shared.contracts import RunnerInfo


@dataclass(frozen=True, slots=True)
class Lease:
    runner: str
    run_id: str
    step_id: str
    attempt: int
    jobs: int  # the runner's job count once it accepted this assignment


class Pool:
    def __init__(self, suspect_for: float = 5.0) -> None:
        self.runners: dict[str, RunnerInfo] = {}
        self.leases: dict[str, Lease] = {}
        self.reserved: set[str] = set()  # assignment in flight
        self._suspect_until: dict[str, float] = {}
        self.suspect_for = suspect_for
        self._order: list[str] = []  # least recently used first

    def update(self, info: RunnerInfo) -> None:
        if info.name not in self.runners:
            self._order.append(info.name)
        self.runners[info.name] = info
        lease = self.leases.get(info.name)
        if lease is not None and info.status == "idle" and info.jobs >= lease.jobs:
            del self.leases[info.name]
        if info.status == "busy" and info.name not in self.leases and info.run_id:
            # Busy with work leased before this dispatcher started.
            self.leases[info.name] = Lease(
                info.name, info.run_id, info.step_id or "", info.attempt or 0, info.jobs
            )

    def remove(self, name: str) -> Lease | None:
        self.runners.pop(name, None)
        self.reserved.discard(name)
        self._suspect_until.pop(name, None)
        if name in self._order:
            self._order.remove(name)
        return self.leases.pop(name, None)

    def free(self, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        return [
            n
            for n in self._order
            if n not in self.leases
            and n not in self.reserved
            and self.runners[n].status == "idle"
            and self._suspect_until.get(n, 0.0) <= now
        ]

    def reserve(self, now: float | None = None) -> str | None:
        free = self.free(now)
        if not free:
            return None
        name = free[0]
        self.reserved.add(name)
        # Round robin: the runner just taken goes to the back of the line.
        self._order.remove(name)
        self._order.append(name)
        return name

    def accepted(self, name: str, run_id: str, step_id: str, attempt: int, jobs: int) -> None:
        self.reserved.discard(name)
        if name in self.runners:
            self.leases[name] = Lease(name, run_id, step_id, attempt, jobs)

    def refused(self, name: str, *, silent: bool, now: float | None = None) -> None:
        """A refusal (our view was stale: the runner is busy) sets it aside briefly; no
        answer at all sets it aside for longer, until the registry says it is gone."""
        self.reserved.discard(name)
        now = time.monotonic() if now is None else now
        self._suspect_until[name] = now + (self.suspect_for if silent else 0.2)

    def release(self, name: str, run_id: str, step_id: str, attempt: int) -> bool:
        lease = self.leases.get(name)
        if lease and (lease.run_id, lease.step_id, lease.attempt) == (run_id, step_id, attempt):
            del self.leases[name]
            self._suspect_until.pop(name, None)
            return True
        return False
