"""A run's actor: one mailbox, one task, messages handled strictly in order.

Different runs proceed concurrently; within a run nothing interleaves, so no lock guards
the run's state. A JetStream message is acknowledged only after the effects it caused are
stored, so a crash at any point leads to redelivery, never to a lost transition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, assert_never

from heddle.services.orchestrator.decisions import Effect
from heddle.services.orchestrator.effects import Effects
from heddle.services.orchestrator.messages import (
    Admit,
    Cancel,
    Create,
    DeadlineTimer,
    GateDecided,
    HandedOff,
    Heard,
    KeyFree,
    KeyTaken,
    Lost,
    Message,
    NoRunner,
    RetryTimer,
    Silent,
    SlotFree,
    SlotsTaken,
)
from heddle.services.orchestrator.state import RunState
from heddle.shared.broker.consume import Outcome, settle
from heddle.shared.broker.nats_types import KeyWrongLastSequenceError
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire.contracts import ChildEnded, StepFinished, StepRecord, StepStarted

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Msg

log = logging.getLogger("heddle.orchestrator")


def runs_on_runner(step: StepRecord) -> bool:
    """Whether a running step is a runner's (the watchdog's to watch): not a forEach step,
    which runs as its instances, nor a call step, whose child runs."""
    return step.for_each is None and step.workflow is None


BATCH_MAX = 256  # messages of one run decided and stored together


class RunActor:
    def __init__(
        self, state: RunState, effects: Effects, on_done: Callable[[RunActor], None]
    ) -> None:
        self.state = state
        self.run_id = state.run.run_id
        self._effects = effects
        self._on_done = on_done
        self._mailbox: asyncio.Queue[tuple[Message, Msg | None]] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        # Monotonic time each running attempt was first seen running here: the watchdog's
        # reference when no heartbeat has been seen, and the backstop deadline's start.
        # Steps found running at a restart count from now; not a forEach step, which runs
        # as its instances (services/orchestrator/loops.py), on no runner.
        mono = time.monotonic()
        self.running_since: dict[str, float] = {
            s.id: mono for s in state.steps.values() if s.status == "running" and runs_on_runner(s)
        }
        self.duplicate = False  # its submit's run was stored already: nothing to do
        self.discarded = False  # its creation failed: forgotten, for the submit's next delivery

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"run-{self.run_id}")

    def post(self, message: Message, msg: Msg | None = None) -> None:
        self._mailbox.put_nowait((message, msg))

    def post_init(
        self,
        effects: list[Effect],
        msg: Msg,
        announce: Callable[[str], Awaitable[None]],
        exists: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.post(Create(effects, announce, exists), msg)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def drain(self) -> None:
        """Wait until every message posted so far has been handled."""
        await self._mailbox.join()

    async def _loop(self) -> None:
        while True:
            batch = [await self._mailbox.get()]
            if not isinstance(batch[0][0], Create):  # a run's first message, only ever
                # Group commit: what queued up while the last batch was being stored is
                # decided together and its writes go out as one pipeline (a record changed
                # twice is written once), then every message of it is acknowledged.
                while len(batch) < BATCH_MAX and not self._mailbox.empty():
                    batch.append(self._mailbox.get_nowait())
            try:
                await self._handle_batch(batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # the run's task must live on: the batch is handled again
                log.exception("run %s: handling %d messages failed", self.run_id, len(batch))
                if isinstance(batch[0][0], Create):
                    # Not created: the submit, delivered again, is a new actor's to create,
                    # so this one is forgotten before the submit is asked for again.
                    self.discarded = True
                    self._on_done(self)
                for _, msg in batch:
                    if msg is not None:
                        await settle(msg, Outcome.FAILED)
            finally:
                for _ in batch:
                    self._mailbox.task_done()
            if self.discarded:
                await self._let_go()
                return
            if self.duplicate or (self.state.done and self._mailbox.empty()):
                self._on_done(self)
                await self._let_go()
                return

    async def _let_go(self) -> None:
        """What was posted behind a creation that did not happen here goes back at once,
        rather than after its acknowledgement wait: its next delivery finds the run's actor,
        or the run stored."""
        while not self._mailbox.empty():
            _, msg = self._mailbox.get_nowait()
            self._mailbox.task_done()
            if msg is not None:
                await settle(msg, Outcome.FAILED)

    async def _handle_batch(self, batch: list[tuple[Message, Msg | None]]) -> None:
        create = batch[0][0]
        if isinstance(create, Create):
            [(_, msg)] = batch  # a run's first message, alone in its batch (_loop)
            await self._create(create)
            if msg is not None:
                await settle(msg, Outcome.DONE)
            return
        effects: list[Effect] = []
        decided: list[Msg] = []
        now = time.time()
        for message, msg in batch:
            try:
                effects.extend(self._decide(message, now))
            except Exception:  # a bug in one decision: that message is retried, not the run lost
                log.exception("run %s: handling %r failed", self.run_id, message)
                if msg is not None:
                    await settle(msg, Outcome.FAILED)
                continue
            if msg is not None:
                decided.append(msg)
        # Whatever the batch freed of the run's window goes to the steps it held back.
        effects.extend(self.state.release(now))
        if effects:
            await self._effects.apply(self.run_id, effects)
        for msg in decided:
            await settle(msg, Outcome.DONE)

    async def _create(self, create: Create) -> None:
        # Checked here, in the run's own task, so submits of different runs are checked
        # concurrently rather than one by one in the command consumer.
        if await create.exists(self.run_id):
            self.duplicate = True  # stored before, long finished: nothing to do
        else:
            try:
                await self._effects.apply(self.run_id, create.effects, create_run=True)
            except KeyWrongLastSequenceError:
                self.duplicate = True  # stored meanwhile, by another delivery of its submit
        try:
            await create.announce(self.run_id)
        except Exception:  # stored: the run goes on, and a waiting gateway reads it instead
            log.exception("run %s stored, not announced", self.run_id)

    def _decide(self, message: Message, now: float) -> list[Effect]:
        """The state machine's answer to one message (no I/O)."""
        state = self.state
        match message:
            case StepStarted():
                effects = state.on_started(message, now)
            case StepFinished():
                effects = state.on_finished(message, now)
            case Silent(step_id=step_id, attempt=attempt, reason=reason):
                effects = state.on_silent(step_id, attempt, reason, now)
            case NoRunner(step_id=step_id, attempt=attempt, reason=reason):
                effects = state.on_no_runner(step_id, attempt, reason, now)
            case Lost(step_id=step_id, attempt=attempt, requeue=requeue):
                effects = state.on_lost(step_id, attempt, requeue, now)
            case RetryTimer(step_id=step_id, attempt=attempt):
                effects = state.on_retry_due(step_id, attempt, now)
            case Cancel(reason=reason):
                effects = state.cancel(now, reason)
            case DeadlineTimer():
                effects = state.on_deadline(now)
            case Admit():
                effects = state.admit(now)
            case HandedOff(step_id=step_id, attempt=attempt, requeue=requeue, runner=runner):
                effects = state.on_handoff_answer(step_id, attempt, requeue, runner, message.answer)
            case Heard(step_id=step_id, attempt=attempt, runner=runner, stored_at=stored_at):
                effects = state.on_heartbeat(step_id, attempt, runner, stored_at)
            case SlotsTaken(step_id=step_id, attempt=attempt, waiting_for=waiting_for):
                effects = state.on_slots(step_id, attempt, waiting_for, now)
            case SlotFree(step_id=step_id):
                effects = state.on_slot_free(step_id, now)
            case KeyTaken(holds=holds, holder=holder, refused=refused, admitted=admitted):
                if message.quota:
                    effects = state.on_quota_taken(holds, holder, admitted, now)
                else:
                    effects = state.on_key_taken(holds, holder, refused, admitted, now)
            case KeyFree():
                effects = state.on_key_free()
            case ChildEnded():
                effects = state.on_child_ended(message, now)
            case GateDecided(step_id=step_id, attempt=attempt, decision=decision):
                effects = state.on_gate_decided(step_id, attempt, decision, now)
            case Create():
                raise TypeError(f"unexpected message {message!r}")  # _create's alone
            case _:
                assert_never(message)
        about: str | None = getattr(message, "step_id", None)
        if about is not None:
            self._track_running(about)
        return effects

    def _track_running(self, step_id: str) -> None:
        step = self.state.steps.get(step_id)
        if step is not None and step.status == "running" and runs_on_runner(step):
            self.running_since.setdefault(step_id, time.monotonic())
        else:
            self.running_since.pop(step_id, None)
