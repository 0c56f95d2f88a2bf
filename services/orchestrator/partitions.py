"""What taking and giving partitions does to an orchestrator (the owner leases.py tells).

Taken, a partition's live runs are rebuilt from heddle-runs, each made whole
(``RunState.resume``), and only then are its heartbeats watched and its commands and events
consumed, what an earlier holder left unacknowledged first. Given away, its runs are drained
within the grace; lost, they are dropped at once, as another holder may be acting on them.
The holder of partition 0 also runs the cron scheduler and the retention (workflows.py)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.broker.kv_reads import read_current, read_steps
from heddle.shared.runtime.service import event
from heddle.shared.wire.contracts import TERMINAL_RUN, run_record_decoder

if TYPE_CHECKING:
    from heddle.services.orchestrator.consumers import PartitionConsumers
    from heddle.services.orchestrator.keys import ConcurrencyKeys
    from heddle.services.orchestrator.live_runs import LiveRuns
    from heddle.services.orchestrator.liveness import Liveness
    from heddle.services.orchestrator.slots import Slots
    from heddle.services.orchestrator.workflows import WorkflowFeatures
    from heddle.shared.broker.buckets import Bucket

log = logging.getLogger("heddle.orchestrator")


class Partitions:
    def __init__(
        self,
        runs: LiveRuns,
        runs_kv: Bucket,
        policy: Policy,
        consumers: PartitionConsumers,
        liveness: Liveness,
        workflows: WorkflowFeatures,
        grace: float,
        slots: Slots | None = None,
        keys: ConcurrencyKeys | None = None,
    ) -> None:
        self.runs, self.runs_kv, self.policy = runs, runs_kv, policy
        self.consumers, self.liveness, self.workflows = consumers, liveness, workflows
        self.grace = grace  # HEDDLE_SHUTDOWN_GRACE: how long runs given away may drain
        self.slots = slots  # the semaphores, made to agree with the runs rebuilt
        self.keys = keys  # the concurrency keys, likewise

    async def take(self, parts: set[int]) -> None:
        """Partitions just acquired: their live runs rebuilt, then their commands and events
        consumed (what an earlier holder left unacknowledged first)."""
        started = time.monotonic()
        await self.consumers.bind(parts)
        await self.rebuild(parts)
        # After the rebuild: a heartbeat replayed before its run's actor exists is dropped.
        self.liveness.watch(parts)
        await self.consumers.start(parts)
        if 0 in parts:
            await self.workflows.lead()
        event(
            log,
            "partitions taken",
            partitions=sorted(parts),
            held=len(self.consumers.held),
            live_runs=len(self.runs.actors),
            took_ms=round((time.monotonic() - started) * 1000),
        )

    async def give(self, parts: set[int], lost: bool) -> None:
        """Partitions given away (their runs drained within the grace first) or lost (their
        runs dropped at once: another holder may be acting on them)."""
        await self.consumers.pause(parts)
        if 0 in parts:
            await self.workflows.follow()
        await self.runs.drop(parts, None if lost else self.grace)
        await self.consumers.stop(parts)
        await self.liveness.unwatch(parts)

    async def rebuild(self, parts: set[int]) -> None:
        """Load the partitions' live runs from KV, make the semaphores and the concurrency
        keys agree with them, and make each whole (RunState.resume)."""
        runs = [
            run_record_decoder.decode(e.value) for e in await read_current(self.runs_kv, "run.*")
        ]
        live = [
            r
            for r in runs
            if r.status not in TERMINAL_RUN
            and self.runs.partition(r.run_id) in parts
            and r.run_id not in self.runs.actors
        ]
        live.sort(key=lambda r: r.created_at)  # the waiting ones keep their order
        states: list[RunState] = []
        for run in live:
            steps = await read_steps(self.runs_kv, run)
            if len(steps) < run.step_count:
                log.error(
                    "run %s has %d of %d step records; leaving it",
                    run.run_id,
                    len(steps),
                    run.step_count,
                )
                continue
            states.append(RunState(run, steps, self.policy))
        # Before any run resumes: its takes and give-backs come after, on the agreed state.
        here = [*states, *(a.state for a in self.runs.in_partitions(parts))]

        def owned(run_id: str) -> bool:
            return self.runs.partition(run_id) in parts

        if self.slots is not None:
            await self.slots.reconcile(owned, [(s.run, s.steps.values()) for s in here])
        if self.keys is not None:
            await self.keys.reconcile(owned, [s.run for s in here])
        now = time.time()
        for state in states:
            await self.runs.recover(state, now)
        # Once every resumed run's effects are stored: an actor's own writes come after.
        self.runs.admit_due()
        event(log, "rebuilt", partitions=sorted(parts), live_runs=len(live), runs_seen=len(runs))
