"""The semaphores' slots of this orchestrator's runs, in heddle-semaphores (docs/pools.md,
"Semaphores"): the effect runner's takes and give-backs (``TakeSlots``, ``GiveBack``), the
answer of a take posted to its run's actor; the watch that tells a waiting step its turn has
come; and, when partitions are taken, the holders made to agree with the rebuilt runs.

Only the holder of a run's partition changes that run's entries: the takes and give-backs
are its actors' effects, written under its lease like their records, and a rebuild
reconciles the entries of the partitions taken alone."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from heddle.services.orchestrator.decisions import Effect, GiveBack, TakeSlots
from heddle.services.orchestrator.messages import Mailboxes, SlotFree, SlotsTaken
from heddle.shared.broker.kv_watch import follow
from heddle.shared.broker.semaphore_store import change, decoded, read_all
from heddle.shared.core import quotas, semaphores
from heddle.shared.runtime.service import event
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire.contracts import Semaphore, SemaphoreHolder, StepRecord

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.wire.contracts import RunRecord

log = logging.getLogger("heddle.orchestrator")


def has_slot_effects(effects: list[Effect]) -> bool:
    return any(isinstance(e, TakeSlots | GiveBack) for e in effects)


class Slots:
    def __init__(
        self, kv: Bucket, runs: Mailboxes, step_quota: Callable[[str], int | None]
    ) -> None:
        self.kv = kv
        self.runs = runs
        self.step_quota = step_quota  # a namespace's running-steps quota: its semaphore's size
        self._watch: asyncio.Task | None = None

    # ---- the effects ----

    async def carry_out(self, run_id: str, effects: list[Effect]) -> None:
        """The batch's takes and give-backs, in order (each may be done again: a take finds
        what it holds, a give-back what it gave)."""
        for eff in effects:
            if isinstance(eff, TakeSlots):
                await self._take(run_id, eff)
            elif isinstance(eff, GiveBack):
                for name in eff.names:
                    await change(self.kv, name, _give_back(run_id, eff.step_id))
                event(log, "slots given back", run=run_id, step=eff.step_id, names=eff.names)

    async def _take(self, run_id: str, eff: TakeSlots) -> None:
        taker = SemaphoreHolder(
            run_id=run_id, step_id=eff.step_id, attempt=eff.attempt, since=eff.since
        )
        waiting_for: str | None = None
        for name in eff.names:  # in name order: a step holding some waits for the next
            got: list[bool] = []
            await change(self.kv, name, _taking(taker, got, self._size(name)))
            if not got[-1]:
                waiting_for = name
                break
        event(
            log,
            "slots taken" if waiting_for is None else "slots waited for",
            run=run_id,
            step=eff.step_id,
            attempt=eff.attempt,
            waiting_for=waiting_for,
        )
        self.runs.post(run_id, SlotsTaken(eff.step_id, eff.attempt, waiting_for))

    def _size(self, name: str) -> int | None:
        """The size a namespace's quota semaphore has now (None: a user's keeps its own)."""
        namespace = quotas.quota_namespace(name)
        return None if namespace is None else quotas.size(self.step_quota(namespace))

    # ---- the watch ----

    def start(self) -> None:
        self._watch = asyncio.create_task(
            follow(
                self.kv,
                self._changed,
                what="semaphores",
                log=log,
                on_caught_up=lambda: None,
            ),
            name="semaphores watch",
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._watch)

    async def _changed(self, entry: object) -> None:
        """A semaphore changed: each waiting step whose turn has come, if its run is live
        here, asks again (runs elsewhere are their orchestrators' to tell)."""
        sem = decoded(getattr(entry, "value", None))
        for waiter in semaphores.due(sem):
            self.runs.post(waiter.run_id, SlotFree(waiter.step_id))

    # ---- a rebuild ----

    async def reconcile(self, owned: Callable[[str], bool], runs: Iterable[RunView]) -> None:
        """Every semaphore made to agree with the runs of the partitions just taken
        (``owned``): entries of steps no longer queued or running given back, those of
        queued or running steps held, waiting steps kept in their places."""
        holding: dict[str, set[tuple[str, str]]] = defaultdict(set)
        waiting: dict[str, set[tuple[str, str]]] = defaultdict(set)
        must: dict[str, list[SemaphoreHolder]] = defaultdict(list)
        for run, steps in runs:
            for step in steps:
                _place(run.run_id, step, holding, waiting, must)
        stored = await read_all(self.kv)
        for name in sorted(set(stored) | set(must)):
            fixed = await change(
                self.kv,
                name,
                _reconciling(owned, holding[name], waiting[name], must[name]),
            )
            event(log, "semaphore reconciled", name=name, holders=len(fixed.holders))


RunView = tuple["RunRecord", Iterable[StepRecord]]


def _place(
    run_id: str,
    step: StepRecord,
    holding: dict[str, set[tuple[str, str]]],
    waiting: dict[str, set[tuple[str, str]]],
    must: dict[str, list[SemaphoreHolder]],
) -> None:
    """What a step's record says it holds and waits for: a queued or running step holds
    each of its semaphores; a waiting one those before the one it waits for."""
    if not step.semaphores or step.for_each is not None:
        return
    key = (run_id, step.id)
    if step.status in ("queued", "running"):
        for name in step.semaphores:
            holding[name].add(key)
            must[name].append(
                SemaphoreHolder(
                    run_id=run_id, step_id=step.id, attempt=step.attempt, since=step.queued_at or ""
                )
            )
    elif step.status == "pending" and step.semaphore_wait is not None:
        waiting[step.semaphore_wait].add(key)
        for name in sorted(step.semaphores):
            if name >= step.semaphore_wait:
                break
            holding[name].add(key)


def _taking(
    taker: SemaphoreHolder, got: list[bool], size: int | None
) -> Callable[[Semaphore], Semaphore]:
    def fn(sem: Semaphore) -> Semaphore:
        sized = sem if size is None else semaphores.resize(sem, size)
        new, granted = semaphores.take(sized, taker)
        got.append(granted)
        return new

    return fn


def _give_back(run_id: str, step_id: str) -> Callable[[Semaphore], Semaphore]:
    return lambda sem: semaphores.give_back(sem, run_id, step_id)


def _reconciling(
    owned: Callable[[str], bool],
    holding: set[tuple[str, str]],
    waiting: set[tuple[str, str]],
    must: list[SemaphoreHolder],
) -> Callable[[Semaphore], Semaphore]:
    return lambda sem: semaphores.reconcile(sem, owned, holding, waiting, must)
