"""Carries out the state machine's effects over NATS, pipelined.

Every effect of one message is sent without waiting, in order, on one connection; then the
acknowledgements are awaited together, so a message costs one round trip, not one per write.
A failed write is retried until it lands: the in-memory state is already ahead of KV, and
KV must catch up before the message that caused it is acknowledged.

How records get into effects, for group commit: a ``PersistStep`` or ``PersistRun`` holds the
record itself, not a copy. A run's actor decides a whole batch of messages (actor.py) before
any write goes out, and a record may change several times within it; each record is encoded
once, at its last write in the batch (``_Batch.last_step_write``), as the batch left it.
What each transition was is snapshotted into its effect when it is decided (``status``,
``attempt``, ``reason``: decisions.py), for its log line and its notes. The actor decides
nothing more until the batch is stored, so a write retried is the same record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, assert_never, cast

from heddle.services.orchestrator.bulk_writes import ACK_TIMEOUT, write_new_steps
from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    Continue,
    Effect,
    Enqueue,
    Ignored,
    KillAttempt,
    PersistRun,
    PersistStep,
    Requeued,
    ScheduleRetry,
)
from heddle.services.orchestrator.effect_metrics import count
from heddle.services.orchestrator.messages import Mailboxes, RetryTimer
from heddle.services.orchestrator.notes import transition_notes
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.kv_reads import last_value_matching
from heddle.shared.broker.nats_types import KeyWrongLastSequenceError, NatsError
from heddle.shared.runtime import failpoints
from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import CancelAttempt, LogLine, RetryDue, StepRecord, encode
from heddle.shared.wire.timefmt import from_epoch

if TYPE_CHECKING:
    from heddle.services.orchestrator.handoff import Handoffs
    from heddle.shared.broker.nats_types import Client, JetStreamContext

log = logging.getLogger("heddle.orchestrator")


class WriteLease(Protocol):
    """Whether this orchestrator may write its runs now (services/orchestrator/leases.py)."""

    def fresh(self) -> bool: ...

    async def until_fresh(self) -> None: ...


class Effects(Protocol):
    """What stores a run's effects: the EffectRunner, or one that wraps it (history.py's
    RecordingEffects)."""

    async def apply(
        self, run_id: str, effects: list[Effect], *, create_run: bool = False
    ) -> None: ...


class EffectRunner:
    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        acked: AckedPublisher,
        runs: Mailboxes | None = None,
        handoffs: Handoffs | None = None,
        lease: WriteLease | None = None,
    ) -> None:
        self.nc = nc
        self.js = js
        self.acked = acked  # every write here is acknowledged: memory is ahead of KV
        # The server's schedule fires up to ~250 ms late and survives restarts; a local
        # timer (posted to the run at its time, ``post_at``) fires on time while this
        # process lives. Whichever comes first queues the attempt; the state machine
        # ignores the other.
        self.runs = runs
        self.handoffs = handoffs  # sends what Enqueue hands to a runner, and its answer
        # Whether this orchestrator's lease is fresh. A process that stood still past it (a
        # pause) may have lost its runs to another holder: its writes wait until its lease
        # is renewed, or until its runs are dropped for having been lost.
        self.lease = lease

    async def apply(self, run_id: str, effects: list[Effect], *, create_run: bool = False) -> None:
        if not create_run:
            failpoints.hit("orchestrator.before_writes")
        await self._until_writable(run_id)
        await self.write_notes(run_id, effects)  # once, not on every retry of the writes
        delay, created, tried = 0.2, create_run, False
        offers = _Once(self._offer, run_id, effects)
        while True:
            await self._until_writable(run_id)
            try:
                await self._apply_once(run_id, effects, create_run, offers)
                count(effects, created)  # once stored: not again if written again
                if self.handoffs is not None:
                    self.handoffs.await_lost(run_id, effects)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # whatever failed, the writes go again: state must reach KV
                if create_run and isinstance(exc, KeyWrongLastSequenceError):
                    mine = await self._created_here(run_id, effects) if tried else False
                    if mine:
                        # An earlier try stored the run and its answer was lost (a server
                        # gone mid-write): the rest of the writes go again, as writes.
                        create_run = False
                        continue
                    if mine is False:
                        raise  # the run exists: stored by an earlier delivery of its submit
                    # Not known whose it is (the record could not be read): asked again.
                tried = True
                log.warning(
                    "writing effects of run %s failed (%s); retrying in %.1fs", run_id, exc, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _created_here(self, run_id: str, effects: list[Effect]) -> bool | None:
        """Whether the stored run record is the one these effects create; None if it could
        not be read (taking it for another's would leave this run with no actor)."""
        run = next(e.run for e in reversed(effects) if isinstance(e, PersistRun))
        try:
            stored = await last_value_matching(self.js, names.RUNS_BUCKET, names.run_key(run_id))
        except NatsError:
            return None
        return stored == encode(run)

    async def _until_writable(self, run_id: str) -> None:
        lease = self.lease
        if lease is None or lease.fresh():
            return
        log.warning("run %s: its writes wait until this orchestrator's lease is renewed", run_id)
        await lease.until_fresh()

    def _offer(self, run_id: str, effects: list[Effect]) -> None:
        if self.handoffs is not None:
            self.handoffs.offer(run_id, effects)

    async def _apply_once(
        self, run_id: str, effects: list[Effect], create_run: bool, offers: _Once
    ) -> None:
        batch = _Batch.of(run_id, effects, create_run)
        try:
            await self._write(batch, effects, offers)
        except BaseException:
            _abandon(batch.futures)  # written again whole: these answers are not awaited
            raise

    async def _write(self, batch: _Batch, effects: list[Effect], offers: _Once) -> None:
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
                    await self._persist_run(batch, i, eff)
                case Enqueue(handoff=None):
                    await self._enqueue(batch, eff)
                case Enqueue() | AwaitHandoff() | Continue():
                    pass  # offered after its record (_write_handed_off), awaited once stored
                case ScheduleRetry():
                    await self._schedule(batch, eff)
                case KillAttempt():
                    await self._kill(batch, eff)
                case Requeued():
                    _log_requeued(run_id, eff)
                case Ignored(step_id=step_id, reason=reason):
                    event(log, "ignored", run=run_id, step=step_id, reason=reason)
                case _:
                    assert_never(eff)
        await self._settle(batch.futures)

    async def _persist_step(self, batch: _Batch, i: int, eff: PersistStep) -> None:
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

    async def _write_handed_off(self, batch: _Batch, effects: list[Effect]) -> None:
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

    async def _publish_step(self, batch: _Batch, step: StepRecord) -> None:
        subject = names.kv_subject(names.RUNS_BUCKET, names.step_key(batch.run_id, step.id))
        batch.futures.append(await self.acked.publish(subject, encode(step)))

    async def _persist_run(self, batch: _Batch, i: int, eff: PersistRun) -> None:
        event(
            log,
            "run",
            run=batch.run_id,
            status=eff.status,
            cancel_requested=eff.cancel_requested,
            waiting=eff.waiting,
        )
        if i != batch.last_run_write:
            return
        headers = None
        if batch.create_run:
            # The run record commits a new run: stored at most once, and only once every
            # step record is stored.
            headers = {"Nats-Expected-Last-Subject-Sequence": "0"}
            await self._settle(batch.futures)
            batch.futures = []
        subject = names.kv_subject(names.RUNS_BUCKET, names.run_key(batch.run_id))
        batch.futures.append(await self.acked.publish(subject, encode(eff.run), headers=headers))

    async def _enqueue(self, batch: _Batch, eff: Enqueue) -> None:
        ready = eff.ready
        msg_id = names.ready_msg_id(ready.run_id, ready.step_id, ready.attempt, ready.requeue)
        batch.futures.append(
            await self.acked.publish(
                names.step_ready(ready.run_id, ready.step_id, eff.opens),
                encode(ready),
                headers={"Nats-Msg-Id": msg_id},
            )
        )

    async def _schedule(self, batch: _Batch, eff: ScheduleRetry) -> None:
        run_id, step_id, attempt = batch.run_id, eff.step_id, eff.attempt
        event(
            log,
            "retry scheduled",
            run=run_id,
            step=step_id,
            attempt=attempt,
            delay_ms=round(eff.delay * 1000),
        )
        batch.futures.append(await self.schedule_retry(run_id, step_id, attempt, eff.at))
        if self.runs is not None:
            self.runs.post_at(run_id, RetryTimer(step_id, attempt), eff.at)

    async def _kill(self, batch: _Batch, eff: KillAttempt) -> None:
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

    @staticmethod
    async def _settle(futures: list[asyncio.Future]) -> None:
        """Wait for the acknowledgements of ``futures``; raise if one failed or is late."""
        if not futures:
            return
        done, pending = await asyncio.wait(futures, timeout=ACK_TIMEOUT)
        for fut in pending:
            fut.cancel()
        # Every failure retrieved, not only the first: the rest are not lost futures.
        failed = [exc for exc in (fut.exception() for fut in done) if exc is not None]
        if pending:
            raise TimeoutError(f"{len(pending)} writes unacknowledged")
        if failed:
            raise failed[0]

    async def schedule_retry(
        self, run_id: str, step_id: str, attempt: int, at: float
    ) -> asyncio.Future:
        # The server holds the timer: it survives an orchestrator restart and fires once.
        # One pending schedule per subject, so re-sending it after a restart replaces it.
        return await self.acked.publish(
            names.sched_timer(run_id, step_id),
            encode(RetryDue(run_id=run_id, step_id=step_id, attempt=attempt)),
            headers={
                "Nats-Schedule": f"@at {from_epoch(at)}",
                "Nats-Schedule-Target": names.cmd_timer(run_id),
            },
        )

    async def write_notes(self, run_id: str, effects: list[Effect]) -> None:
        """The batch's transition notes into the steps' logs (see notes.py): core publishes,
        sent ahead of the state writes on the same connection, never awaited, never fatal."""
        try:
            for note in transition_notes(effects):
                await self.nc.publish(
                    names.log(run_id, note.step_id, note.attempt),
                    encode(LogLine(stream="heddle", seq=0, text=note.text)),
                )
        except NatsError as exc:
            log.warning("transition notes of run %s not written: %s", run_id, exc)


def _abandon(futures: list[asyncio.Future]) -> None:
    for fut in futures:
        if fut.done():
            if not fut.cancelled():
                fut.exception()
        else:
            fut.cancel()


@dataclass(slots=True)
class _Batch:
    """One pass over a batch's effects: the index of each record's last write (a record
    changed several times is written once, in its final state) and the acknowledgements
    to wait for."""

    run_id: str
    create_run: bool
    last_step_write: dict[str, int]
    last_run_write: int
    futures: list[asyncio.Future] = field(default_factory=list)
    written: set[str] = field(default_factory=set)  # step records already sent in this pass
    handed: set[str] = field(default_factory=set)  # steps offered to a runner directly

    @classmethod
    def of(cls, run_id: str, effects: list[Effect], create_run: bool) -> _Batch:
        steps: dict[str, int] = {}
        handed: set[str] = set()
        last_run = -1
        for i, e in enumerate(effects):
            if isinstance(e, PersistStep):
                steps[e.step.id] = i
            elif isinstance(e, PersistRun):
                last_run = i
            elif isinstance(e, Enqueue) and e.handoff is not None:
                handed.add(e.ready.step_id)
            elif isinstance(e, Continue):
                handed.add(e.ready.step_id)
            elif isinstance(e, AwaitHandoff):
                handed.add(e.step_id)
        return cls(run_id, create_run, steps, last_run, handed=handed)


class _Once:
    """Calls ``fn(*args)`` the first time it is called, never again."""

    def __init__(self, fn: Callable[..., None], *args: object) -> None:
        self._fn: Callable[..., None] | None = fn
        self._args = args

    def __call__(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn(*self._args)


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
