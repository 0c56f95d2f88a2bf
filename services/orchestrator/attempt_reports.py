"""What a run hears of an attempt from its runner, a part of the run's state machine
(state.py): the started and finished events, heartbeats, and the answer to a handoff.

Its own module: a runner's report counts only under the attempt's ticket, from the runner
that holds the attempt now, and one that does not count may have to be fenced; that one
guard, and what each report then changes, is apart from the run's own decisions (state.py:
making, admitting, cancelling, recovering, the watchdog's and the backstop's findings).
Given the run's records (run_steps.py), its chains (continuations.py) and a step's
transitions (transitions.py). Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec
from heddle.services.orchestrator.continuations import Chains
from heddle.services.orchestrator.decisions import Effect, Ignored, KillAttempt, PersistStep
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.services.orchestrator.transitions import StepTransitions, enqueue
from heddle.shared.core.tickets import holds
from heddle.shared.wire.contracts import AttemptRecord, StepFinished, StepRecord, StepStarted

HandoffAnswer = Literal["accepted", "refused", "unanswered"]


@dataclass(frozen=True, slots=True)
class Refused:
    """An event about a step that does not count: what to say, and whether the attempt it
    reports lives on all the same and must be fenced."""

    effects: list[Effect]
    fence: bool


class AttemptReports:
    """A run's answers to what its attempts' runners say."""

    def __init__(self, records: RunSteps, chains: Chains, transitions: StepTransitions) -> None:
        self.records = records
        self.chains = chains
        self.transitions = transitions

    def _counted(
        self, kind: str, step_id: str, ticket: str, attempt: int, runner: str
    ) -> StepRecord | Refused:
        """The step a runner's event is about, if the event counts: the step is known, the
        ticket is the attempt's, and the attempt is current and that runner's. The one guard
        of ``on_started`` and ``on_finished``."""
        step = self.records.steps.get(step_id)
        if step is None:
            return Refused([Ignored(step_id, f"{kind} event for an unknown step")], fence=False)
        if not holds(step.ticket, ticket):
            # Not from the runner given the attempt: nothing to fence, nothing to believe.
            why = f"{kind} event ignored: its ticket is not the attempt's"
            return Refused([Ignored(step.id, why)], fence=False)
        stale = self.records.stale(step, attempt, runner)
        if stale:
            ignored: list[Effect] = [Ignored(step.id, f"{kind} event ignored: {stale}")]
            # A continuation reporting early is heard, not fenced (Chains.reported_early).
            early = self.chains.reported_early(step, attempt, runner)
            return Refused(ignored, fence=not early)
        return step

    def on_started(self, ev: StepStarted, now: float) -> list[Effect]:
        step = self._counted("started", ev.step_id, ev.ticket, ev.attempt, ev.runner)
        if isinstance(step, Refused):
            if not step.fence:
                return step.effects
            # The attempt lives on although it does not count: fence it.
            reason = "attempt does not count"
            return [
                *step.effects,
                KillAttempt(ev.runner, ev.step_id, ev.attempt, reason, ev.ticket),
            ]
        if step.status == "running":
            return [Ignored(step.id, "duplicate started event")]
        prev = step.status
        step.status = "running"
        step.runner = ev.runner
        step.started_at = ev.started_at
        step.attempts.append(
            AttemptRecord(
                attempt=ev.attempt, runner=ev.runner, pid=ev.pid, started_at=ev.started_at
            )
        )
        effects: list[Effect] = [PersistStep(step, prev)]
        if self.records.halted(step):
            why = self.records.stop_reason
            effects.append(KillAttempt(ev.runner, step.id, ev.attempt, why, ev.ticket))
        return effects

    def on_finished(self, ev: StepFinished, now: float) -> list[Effect]:
        step = self._counted("finished", ev.step_id, ev.ticket, ev.attempt, ev.runner)
        if isinstance(step, Refused):
            if not step.fence:
                return step.effects
            why = "the attempt it follows does not count"
            return step.effects + self.chains.not_continued(ev, why)
        if step.status == "queued":
            # A step that ended within the runner's report delay has no started event (nor
            # has one whose event was lost): the outcome says when and as which pid it began.
            step.runner = ev.runner
            step.started_at = ev.started_at
            step.attempts.append(
                AttemptRecord(
                    attempt=ev.attempt, runner=ev.runner, pid=ev.pid, started_at=ev.started_at
                )
            )
        step.exit_code = ev.exit_code
        step.stdout_tail = ev.stdout_tail
        step.stderr_tail = ev.stderr_tail
        self.records.close_attempt(step, ev.finished_at, ev.exit_code, ev.reason)
        if ev.outcome == "succeeded":
            if ev.outputs and step.attempts and step.attempts[-1].attempt == step.attempt:
                step.attempts[-1].outputs = dict(ev.outputs)  # only a success's are kept
            return self.transitions.succeed(step, ev.finished_at, by=ev.runner, outcome=ev)
        reason = ev.reason or (
            f"exit code {ev.exit_code}" if ev.exit_code is not None else ev.outcome
        )
        failed = self.transitions.attempt_failed(step, reason, now, immediate=False)
        return failed + self.chains.not_continued(ev, "the attempt it follows failed")

    def on_handoff_answer(
        self, step_id: str, attempt: int, requeue: int, runner: str, answer: HandoffAnswer
    ) -> list[Effect]:
        """What the runner an attempt was handed to answered. Accepted: it holds the attempt.
        Refused (busy, stopping, or not there): the attempt goes to the dispatchers. No answer:
        it may hold the attempt, so the dispatchers look for it before they offer it. Nothing
        if the attempt has moved on (its outcome came first, as a short step's does)."""
        step = self.records.steps.get(step_id)
        if (
            step is None
            or step.status != "queued"
            or (step.attempt, step.requeues, step.offered_to) != (attempt, requeue, runner)
        ):
            return []
        step.offered_to = None
        if answer == "accepted":
            self.on_accepted(step_id, attempt, runner)
            return []
        if step.runner is not None:  # its heartbeat was heard: the runner has it
            return []
        ready, _ = self.records.ready_message(step)
        if answer == "unanswered":
            ready = msgspec.structs.replace(ready, check=True, held_by=runner)
        return [enqueue(step, ready)]

    def on_heartbeat(
        self, step_id: str, attempt: int, runner: str, stored_at: str | None
    ) -> list[Effect]:
        """A heartbeat of the attempt's runner: the step shows when it was last heard (kept
        in memory and stored with the step's next record: a write per heartbeat would cost
        more than the display is worth), and a queued attempt learns its runner."""
        step = self.records.steps.get(step_id)
        if step is not None:
            step.last_heartbeat_at = stored_at
            self.chains.heard_going_on(step, attempt, runner)
        self.on_accepted(step_id, attempt, runner)
        return []

    def on_accepted(self, step_id: str, attempt: int, runner: str) -> None:
        """A heartbeat shows which runner holds a queued attempt (before it reported started),
        so a later verdict can fence that runner."""
        step = self.records.steps.get(step_id)
        if step is not None and step.status == "queued" and step.attempt == attempt:
            step.runner = runner
