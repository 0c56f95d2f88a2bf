"""One pass of a batch's writes over NATS, pipelined (the effect runner, effects.py, makes
passes until one is stored).

Every effect of the batch is sent without waiting, in order, on one connection; then the
acknowledgements are awaited together, so a batch costs one round trip, not one per write.

How records get into effects, for group commit: a ``PersistStep`` or ``PersistRun`` holds the
record itself, not a copy. A run's actor decides a whole batch of messages (actor.py) before
any write goes out, and a record may change several times within it; each record is encoded
once, at its last write in the batch (``Batch.last_step_write``), as the batch left it.
What each transition was is snapshotted into its effect when it is decided (``status``,
``attempt``, ``reason``: decisions.py), for its log line and its notes. The actor decides
nothing more until the batch is stored, so a write retried is the same record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, assert_never, cast

from heddle.services.orchestrator.bulk_writes import write_new_steps
from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    CancelChild,
    CloseGate,
    Continue,
    CreateNotifications,
    Effect,
    Enqueue,
    GiveBack,
    Ignored,
    KillAttempt,
    LeaveKey,
    OpenGate,
    PersistRun,
    PersistStep,
    Requeued,
    ScheduleDeadline,
    ScheduleRetry,
    StartChild,
    TakeKey,
    TakeSlots,
    TellParent,
)
from heddle.services.orchestrator.effect_batch import MID_EXPANSION, Batch, abandon, expands, settle
from heddle.services.orchestrator.messages import DeadlineTimer, Mailboxes, RetryTimer
from heddle.services.orchestrator.notify_writes import create_notifications
from heddle.services.orchestrator.timer_writes import deadline_due, retry_due
from heddle.shared.core.labels import label_key
from heddle.shared.runtime import failpoints
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    CancelAttempt,
    StepRecord,
    encode,
)
from heddle.shared.wire.timefmt import from_epoch

if TYPE_CHECKING:
    from heddle.services.orchestrator.child_runs import ChildRuns
    from heddle.shared.broker.acked import AckedPublisher
    from heddle.shared.broker.nats_types import Client, JetStreamContext

log = logging.getLogger("heddle.orchestrator")


class EffectWrites:
    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        acked: AckedPublisher,
        runs: Mailboxes | None,
        children: ChildRuns | None = None,
    ) -> None:
        self.nc, self.js = nc, js
        self.children = children  # the calls' child runs (docs/sub-workflows.md)
        self.acked = acked  # every write here is acknowledged: memory is ahead of KV
        # The server's schedule fires up to ~250 ms late and survives restarts; a local
        # timer (posted to the run at its time, ``post_at``) fires on time while this
        # process lives. Whichever comes first queues the attempt; the state machine
        # ignores the other.
        self.runs = runs

    async def once(
        self, run_id: str, effects: list[Effect], create_run: bool, offers: Callable[[], None]
    ) -> None:
        """Every write of the batch sent, then every acknowledgement awaited; raises if one
        failed (the caller writes the batch again, whole). ``offers`` sends the handoffs,
        right after the records of the steps handed off, once however often it is called."""
        batch = Batch.of(run_id, effects, create_run)
        try:
            await self._write(batch, effects, offers)
        except BaseException:
            abandon(batch.futures)  # written again whole: these answers are not awaited
            raise

    async def _write(self, batch: Batch, effects: list[Effect], offers: Callable[[], None]) -> None:
        run_id, create_run = batch.run_id, batch.create_run
        if create_run:
            # The effects written are PersistSteps, by their index.
            for i in await write_new_steps(self.nc, self.js, self.acked, run_id, effects):
                batch.last_step_write.pop(cast(PersistStep, effects[i]).step.id, None)
        if batch.handed:
            await self._write_handed_off(batch, effects)
            offers()
        for i, eff in enumerate(effects):
            match eff:
                case PersistStep():
                    await self._persist_step(batch, i, eff)
                case PersistRun():
                    if failpoints.active(MID_EXPANSION) and expands(effects):
                        await settle(batch.futures)  # the instances' records stored
                        failpoints.hit(MID_EXPANSION)
                    await self._persist_run(batch, i, eff)
                case Enqueue(handoff=None):
                    await self._enqueue(batch, eff)
                case Enqueue() | AwaitHandoff() | Continue():
                    pass  # offered after its record (_write_handed_off), awaited once stored
                case ScheduleRetry():
                    await self._schedule(batch, eff)
                case ScheduleDeadline():
                    await self._schedule_deadline(batch, eff)
                case KillAttempt():
                    await self._kill(batch, eff)
                case Requeued():
                    _log_requeued(run_id, eff)
                case StartChild() | CancelChild() | TellParent():
                    if self.children is not None:
                        batch.futures.append(await self.children.publish(run_id, eff))
                case OpenGate() | CloseGate():
                    await self._gate(batch, eff)
                case TakeSlots() | GiveBack() | TakeKey() | LeaveKey():
                    pass  # after the batch's records (effects.py, slots.py, keys.py)
                case CreateNotifications():
                    await self._create_notifications(batch, eff)
                case Ignored(step_id=step_id, reason=reason):
                    event(log, "ignored", run=run_id, step=step_id, reason=reason)
                case _:
                    assert_never(eff)
        await settle(batch.futures)

    async def _persist_step(self, batch: Batch, i: int, eff: PersistStep) -> None:
        """Logs the transition; writes the record if this is its last write in the batch."""
        step = eff.step
        if step.id not in batch.last_step_write:
            return  # stored in bulk with the new run
        if eff.previous != eff.status:
            event(
                log,
                "step",
                run=batch.run_id,
                step=step.id,
                attempt=eff.attempt,
                status=eff.status,
                was=eff.previous,
                reason=eff.reason,
            )
        if batch.last_step_write[step.id] == i and step.id not in batch.written:
            await self._publish_step(batch, step)

    async def _write_handed_off(self, batch: Batch, effects: list[Effect]) -> None:
        """The records of the steps handed off go first, and their offers right after
        them, before their acknowledgements: a server that loses the end of a pipeline
        loses the predecessor's record with them, and the rebuilt run offers the step to
        the same runner again, which answers as it did (runner_agent/taken.py). So do the
        records of continuations, prepared (their ticket) or started: a stored success
        of the step they follow implies them."""
        for i, eff in enumerate(effects):
            if isinstance(eff, PersistStep) and eff.step.id in batch.handed:
                if batch.last_step_write.get(eff.step.id) == i:
                    await self._publish_step(batch, eff.step)
                    batch.written.add(eff.step.id)

    async def _publish_step(self, batch: Batch, step: StepRecord) -> None:
        subject = names.kv_subject(names.RUNS_BUCKET, names.step_key(batch.run_id, step.id))
        batch.futures.append(await self.acked.publish(subject, encode(step)))

    async def _persist_run(self, batch: Batch, i: int, eff: PersistRun) -> None:
        event(
            log,
            "run",
            run=batch.run_id,
            status=eff.status,
            cancel_requested=eff.cancel_requested,
            waiting=eff.waiting,
            reason=eff.reason,
        )
        if i != batch.last_run_write:
            return
        headers = None
        if batch.create_run:
            # The run record commits a new run: stored at most once, and only once every
            # step record is stored.
            headers = {"Nats-Expected-Last-Subject-Sequence": "0"}
            await settle(batch.futures)
            batch.futures = []
        subject = names.kv_subject(names.RUNS_BUCKET, names.run_key(batch.run_id))
        batch.futures.append(await self.acked.publish(subject, encode(eff.run), headers=headers))

    async def _create_notifications(self, batch: Batch, eff: CreateNotifications) -> None:
        # A run that ends as it is created (refused at its key): only once it is stored,
        # so a submit of a run that exists makes no deliveries for it.
        await batch.after_new_run()
        batch.futures += await create_notifications(self.acked, eff)

    async def _enqueue(self, batch: Batch, eff: Enqueue) -> None:
        ready = eff.ready
        msg_id = names.ready_msg_id(ready.run_id, ready.step_id, ready.attempt, ready.requeue)
        batch.futures.append(
            await self.acked.publish(
                names.step_ready(ready.run_id, ready.step_id, eff.opens, label_key(ready.runs_on)),
                encode(ready),
                headers={"Nats-Msg-Id": msg_id},
            )
        )

    async def _schedule(self, batch: Batch, eff: ScheduleRetry) -> None:
        run_id, step_id, attempt = batch.run_id, eff.step_id, eff.attempt
        event(
            log,
            "retry scheduled",
            run=run_id,
            step=step_id,
            attempt=attempt,
            delay_ms=round(eff.delay * 1000),
        )
        await batch.after_new_run()  # a new run's gate's timeout
        batch.futures.append(await retry_due(self.acked, run_id, step_id, attempt, eff.at))
        if self.runs is not None:
            self.runs.post_at(run_id, RetryTimer(step_id, attempt), eff.at)

    async def _schedule_deadline(self, batch: Batch, eff: ScheduleDeadline) -> None:
        """The run's deadline, as a retry timer is: the server's schedule, on a subject of
        the run's own (heddle.sched.deadline.<run>: no step's retry timer replaces it), and
        the local timer. One that came early is set again locally alone."""
        run_id, deadline_at = batch.run_id, from_epoch(eff.at)
        event(
            log,
            "deadline scheduled",
            run=run_id,
            deadline_at=deadline_at,
            delay_ms=round(eff.delay * 1000),
            durable=eff.durable,
        )
        if eff.durable:
            await batch.after_new_run()
            batch.futures.append(await deadline_due(self.acked, run_id, deadline_at))
        if self.runs is not None:
            self.runs.post_at(run_id, DeadlineTimer(), eff.at)

    async def _gate(self, batch: Batch, eff: OpenGate | CloseGate) -> None:
        """An approval gate's record written, or deleted once the gate ended."""
        step_id = eff.gate.step_id if isinstance(eff, OpenGate) else eff.step_id
        subject = names.kv_subject(
            names.APPROVALS_BUCKET, names.approval_key(batch.run_id, step_id)
        )
        await batch.after_new_run()
        if isinstance(eff, OpenGate):
            batch.futures.append(await self.acked.publish(subject, encode(eff.gate)))
        else:
            batch.futures.append(
                await self.acked.publish(subject, b"", headers={"KV-Operation": "DEL"})
            )

    async def _kill(self, batch: Batch, eff: KillAttempt) -> None:
        """A core publish, not acknowledged: the state machine fences the attempt whether
        or not its runner hears this."""
        event(
            log,
            "kill attempt",
            run=batch.run_id,
            step=eff.step_id,
            attempt=eff.attempt,
            runner=eff.runner,
            reason=eff.reason,
        )
        cancel = CancelAttempt(
            run_id=batch.run_id,
            step_id=eff.step_id,
            attempt=eff.attempt,
            reason=eff.reason,
            ticket=eff.ticket,
        )
        await self.nc.publish(names.runner_cancel(eff.runner), encode(cancel))


def _log_requeued(run_id: str, eff: Requeued) -> None:
    event(
        log,
        "step requeued",
        run=run_id,
        step=eff.step_id,
        attempt=eff.attempt,
        requeue=eff.requeue,
        reason="no runner holds it and its ready message is gone",
    )
