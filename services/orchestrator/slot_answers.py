"""A step's semaphores, a part of the run's state machine (state.py): what the answer to a
take of its slots does, and a slot freed for a step waiting in line (docs/pools.md,
"Semaphores"). Asking is ``StepTransitions.wait_for_slots``; giving back is
``decisions.giving_back``. Pure: no I/O, no clock.
"""

from __future__ import annotations

from heddle.services.orchestrator.decisions import (
    Effect,
    GiveBack,
    Ignored,
    PersistStep,
    TakeSlots,
)
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.services.orchestrator.transitions import StepTransitions
from heddle.shared.wire.contracts import StepRecord
from heddle.shared.wire.timefmt import from_epoch


class SlotAnswers:
    def __init__(self, records: RunSteps, transitions: StepTransitions) -> None:
        self.records = records
        self.transitions = transitions

    def _waiting(self, step: StepRecord | None, attempt: int | None = None) -> bool:
        """Whether ``step`` waits for its slots (for ``attempt``, if given)."""
        return (
            step is not None
            and step.status == "pending"
            and step.semaphore_wait is not None
            and (attempt is None or step.attempt + 1 == attempt)
        )

    def on_slots(
        self, step_id: str, attempt: int, waiting_for: str | None, now: float
    ) -> list[Effect]:
        """The answer to ``TakeSlots``: every slot held (``waiting_for`` None), and the step
        is queued; or the semaphore it waits for. Slots a step no longer waiting was given
        (cancelled meanwhile) go back at once, and so does its place in line."""
        step = self.records.steps.get(step_id)
        if step is None or not self._waiting(step, attempt):
            if step is not None and step.status not in ("pending", "queued", "running"):
                # Ended (or waiting out a backoff) since it asked: what it got goes back.
                return [GiveBack(step.id, tuple(sorted(step.semaphores)))]
            return [Ignored(step_id, f"semaphore answer for attempt {attempt} ignored")]
        assert step is not None  # for the type checker: _waiting says so
        if waiting_for is not None:
            if step.semaphore_wait == waiting_for:
                return []
            step.semaphore_wait = waiting_for
            return [PersistStep(step, step.status)]
        step.semaphore_wait = None
        return self.transitions.queue(step, attempt, from_epoch(now), granted=True)

    def on_slot_free(self, step_id: str, now: float) -> list[Effect]:
        """A slot of the semaphore the step waits for is free and its turn has come: it
        asks again (a take that finds it holding or waiting changes nothing)."""
        step = self.records.steps.get(step_id)
        if step is None or not self._waiting(step) or self.records.halted(step):
            return []
        names = tuple(sorted(step.semaphores))
        return [TakeSlots(step.id, step.attempt + 1, names, from_epoch(now))]
