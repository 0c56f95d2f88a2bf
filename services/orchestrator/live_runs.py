"""The runs live in this orchestrator: one actor each (actor.py), by run id, with the runs
that ended here lately and which runs are under way or waiting their turn (admission.py).

Whatever reaches a run goes through here: a submit spawns its actor (submissions.py), a
command, an event, a handoff's answer or a retry timer is posted to it (routing.py,
handoff.py, effects.py), a partition taken rebuilds its runs and one given away drops them
(partitions.py). An actor that ends tells ``actor_done``: its run is remembered as ended, the
liveness forgets it, and its place goes to the next waiting run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.admission import Admission
from heddle.services.orchestrator.messages import Admit, Message
from heddle.services.orchestrator.step_waits import Series, Tally, tally_run
from heddle.shared.core.partitions import partition_of
from heddle.shared.runtime.metrics import (
    LIVE_RUNS,
    WAITING_OLDEST,
    WAITING_RUNS,
    WAITING_STEPS,
    before_scrape,
    forget_before_scrape,
)
from heddle.shared.runtime.service import event
from heddle.shared.wire.timefmt import epoch_of

if TYPE_CHECKING:
    from heddle.services.orchestrator.effects import Effects
    from heddle.services.orchestrator.liveness import Liveness
    from heddle.services.orchestrator.state import RunState
    from heddle.shared.broker.nats_types import Msg

log = logging.getLogger("heddle.orchestrator")
FINISHED_MEMORY = 50_000  # runs remembered as ended, for the events that come after


class LiveRuns:
    def __init__(self, max_under_way: int, partitions: int) -> None:
        self.actors: dict[str, RunActor] = {}
        self.finished: OrderedDict[str, str] = OrderedDict()  # run -> terminal status
        self.admission = Admission(max_under_way)
        self.partitions = partitions
        self._effects: Effects | None = None  # what the actors store through (start)
        self._liveness: Liveness | None = None
        self._admitting = True
        self._step_wait_series: set[Series] = set()  # every series set so far, to zero

    def start(self, effects: Effects, liveness: Liveness) -> None:
        """Serve runs: their actors store through ``effects``, and ``liveness`` forgets a
        run once it is gone. The gauges read these runs from now, at a scrape."""
        self._effects, self._liveness = effects, liveness
        LIVE_RUNS.set_function(lambda: len(self.actors))
        WAITING_RUNS.set_function(lambda: len(self.admission.waiting))
        before_scrape(self.count_step_waits)

    async def count_step_waits(self) -> None:
        """The waiting steps of the live runs, by pool and reason (step_waits.py): one pass
        over their records, when scraped."""
        now = time.time()
        found: dict[Series, Tally] = {}
        for actor in list(self.actors.values()):
            state = actor.state
            created = epoch_of(state.run.created_at, now)
            tally_run(state.steps, state.records.held, created, now, found)
        for pool, reason in self._step_wait_series - found.keys():
            WAITING_STEPS.labels(pool, reason).set(0)
            WAITING_OLDEST.labels(pool, reason).set(0)
        for (pool, reason), t in found.items():
            WAITING_STEPS.labels(pool, reason).set(t.count)
            WAITING_OLDEST.labels(pool, reason).set(round(t.oldest, 3))
        self._step_wait_series |= found.keys()

    def stop(self) -> None:
        """No waiting run is admitted from now: whoever takes the partitions admits them."""
        self._admitting = False
        forget_before_scrape(self.count_step_waits)

    # ---- a run's actor ----

    def known(self, run_id: str) -> bool:
        """Whether the run is live here or ended lately."""
        return run_id in self.actors or run_id in self.finished

    def ended(self, run_id: str) -> str | None:
        """The status of a run that ended here lately."""
        return self.finished.get(run_id)

    @property
    def effects(self) -> Effects:
        if self._effects is None:
            raise RuntimeError("the live runs are not started")
        return self._effects

    def spawn(self, state: RunState) -> RunActor:
        actor = RunActor(state, self.effects, self.actor_done)
        self.actors[actor.run_id] = actor
        actor.start()
        return actor

    def post(self, run_id: str, message: Message, msg: Msg | None = None) -> bool:
        """To the run's actor, which settles ``msg`` once its effects are stored; False if
        the run has no actor here (ended, unknown, or another orchestrator's)."""
        actor = self.actors.get(run_id)
        if actor is None:
            return False
        actor.post(message, msg)
        return True

    def post_at(self, run_id: str, message: Message, at: float) -> None:
        """Posted at ``at`` (epoch seconds), to the actor the run has then: the local retry
        timer, on time while this process lives (the server's fires up to ~250 ms late)."""
        asyncio.get_running_loop().call_later(
            max(at - time.time(), 0.0), self.post, run_id, message
        )

    def actor_done(self, actor: RunActor) -> None:
        self._forget(actor.run_id)
        self.admit_due()
        if actor.duplicate:
            event(log, "duplicate submit", run=actor.run_id)
            return
        if actor.discarded:
            return  # never created: its submit comes again
        self.finished[actor.run_id] = actor.state.run.status
        while len(self.finished) > FINISHED_MEMORY:
            self.finished.popitem(last=False)

    # ---- runs under way ----

    def arrive(self, run_id: str, priority: int = 0, child: bool = False) -> bool:
        """A new run: under way now (True), or waiting for its turn (False); a ``child``
        run of a call, under way at once (docs/sub-workflows.md)."""
        return self.admission.arrive(run_id, priority, past_bound=child)

    def key_held(self, run_id: str, priority: int) -> bool:
        """A run live here has just taken its concurrency key: under way now (True), or
        waiting for its turn (False). Once: a run in its place already keeps it, and one
        ended (gone from here) takes none; none while stopping (whoever takes the partition
        admits it)."""
        placed = run_id in self.admission.under_way or run_id in self.admission.waiting
        actor = self.actors.get(run_id)
        if actor is None or placed or not self._admitting:
            return False
        child = actor.state.run.parent_run is not None
        return self.admission.arrive(run_id, priority, past_bound=child)

    def free_place(self, run_id: str) -> None:
        """The run ended, or was never made: its place goes to whoever's turn it is."""
        self.admission.gone(run_id)
        self.admit_due()

    def admit_due(self) -> None:
        """The waiting runs whose turn it is: each one's actor queues its first steps."""
        if not self._admitting:
            return
        while due := self.admission.due():
            for run_id in due:
                if not self.post(run_id, Admit()):  # not live here any more: its turn passes
                    self.admission.gone(run_id)

    # ---- partitions ----

    async def recover(self, state: RunState, now: float) -> None:
        """A live run rebuilt from its records (``RunState.resume``): its actor spawned (the
        running steps count as running from now), its place kept, its resumed effects stored.
        A run waiting for its quota or its concurrency key has no place until it holds them
        (``key_held``)."""
        self.spawn(state)
        run = state.run
        if run.concurrency_wait is None and not run.quota_wait:
            self.admission.recovered(run.run_id, run.waiting, run.priority)
        effects = state.resume(now)
        if effects:
            await self.effects.apply(run.run_id, effects)

    def in_partitions(self, parts: set[int]) -> list[RunActor]:
        return [a for a in self.actors.values() if self.partition(a.run_id) in parts]

    def partition(self, run_id: str) -> int:
        return partition_of(run_id, self.partitions)

    async def drop(self, parts: set[int], drain_within: float | None) -> None:
        """The runs of partitions no longer held: drained within ``drain_within`` seconds
        first (given away), or stopped at once (None: lost, another holder may be acting
        on them). Their places go to runs still held here."""
        actors = self.in_partitions(parts)
        if drain_within is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(a.drain() for a in actors)), drain_within)
        await asyncio.gather(*(a.stop() for a in actors), return_exceptions=True)
        for actor in actors:
            if self.actors.get(actor.run_id) is actor:
                self._forget(actor.run_id)
        self.admit_due()

    def _forget(self, run_id: str) -> None:
        """The run is not live here any more: its actor, its heartbeats and its place."""
        self.actors.pop(run_id, None)
        if self._liveness is not None:
            self._liveness.forget_run(run_id)
        self.admission.gone(run_id)
