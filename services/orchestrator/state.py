"""A run's state machine: every step and run transition Heddle makes. This file holds the
messages a run receives, its making and its recovery; it is composed of the run's records
(``run_steps.py``), a step's transitions (``transitions.py``) and its chains
(``continuations.py``), each an object of its own that the next is given.

Pure: each method takes a message (and the time) and returns the effects to carry out, in
order; the run actor performs them. Nothing here awaits, touches NATS, or reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec
from heddle.services.orchestrator.continuations import Chains
from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    Effect,
    Ignored,
    KillAttempt,
    PersistRun,
    PersistStep,
    Requeued,
    ScheduleRetry,
)
from heddle.services.orchestrator.run_steps import Policy, RunSteps
from heddle.services.orchestrator.transitions import StepTransitions, enqueue
from heddle.shared.core.tickets import holds, new_ticket
from heddle.shared.wire.contracts import (
    AttemptRecord,
    RunRecord,
    StepFinished,
    StepRecord,
    StepStarted,
    SubmitRun,
)
from heddle.shared.wire.timefmt import from_epoch, parse

__all__ = ["HandoffAnswer", "Policy", "RunState"]

HandoffAnswer = Literal["accepted", "refused", "unanswered"]


@dataclass(frozen=True, slots=True)
class Refused:
    """An event about a step that does not count: what to say, and whether the attempt it
    reports lives on all the same and must be fenced."""

    effects: list[Effect]
    fence: bool


def _carry_over(step: StepRecord, done: AttemptRecord, run_id: str) -> None:
    """A step of a retried run that succeeded there: succeeded here too, with the attempt
    that succeeded (and its outputs), and not run again."""
    step.status = "succeeded"
    step.attempt = done.attempt
    step.attempts = [done]
    step.runner = done.runner
    step.started_at = done.started_at
    step.finished_at = done.finished_at
    step.exit_code = done.exit_code
    step.reason = f"succeeded in run {run_id}; not run again"


class RunState:
    """One run's steps, as the orchestrator's actor holds them in memory."""

    def __init__(
        self,
        run: RunRecord,
        steps: list[StepRecord],
        policy: Policy,
        rand: Callable[[], float] = random.random,
        tickets: Callable[[], str] = new_ticket,
    ) -> None:
        self.records = RunSteps(run, steps, policy, rand, tickets)
        self.chains = Chains(self.records)
        self.transitions = StepTransitions(self.records, self.chains)

    @property
    def run(self) -> RunRecord:
        return self.records.run

    @property
    def steps(self) -> dict[str, StepRecord]:
        return self.records.steps

    @property
    def done(self) -> bool:
        return self.records.done

    # ---- construction ----

    @classmethod
    def new(
        cls,
        cmd: SubmitRun,
        policy: Policy,
        now: float,
        rand: Callable[[], float] = random.random,
        tickets: Callable[[], str] = new_ticket,
        admitted: bool = True,
    ) -> tuple[RunState, list[Effect]]:
        """The run's records to store, its first steps queued; or, not ``admitted`` (the
        runs under way at their bound), stored waiting, every step pending until ``admit``."""
        created = cmd.submitted_at
        run = RunRecord(
            run_id=cmd.run_id,
            status="running",
            created_at=created,
            step_count=len(cmd.steps),
            workflow_name=cmd.workflow_name,
            version=cmd.version,
            trigger=cmd.trigger,
            scheduled_for=cmd.scheduled_for,
            scheduled_tz=cmd.scheduled_tz,
            params=dict(cmd.params),
            env=dict(cmd.env),
            waiting=not admitted,
        )
        steps = [
            StepRecord(
                id=s.id,
                command=s.command,
                index=i,
                depends_on=list(s.depends_on),
                retries=s.retries,
                timeout_seconds=s.timeout_seconds or policy.default_timeout,
                env=dict(s.env),
            )
            for i, s in enumerate(cmd.steps)
        ]
        if cmd.retry_of is not None:
            run.retry_of = cmd.retry_of
            for step in steps:
                done = cmd.carried.get(step.id)
                if done is not None:
                    _carry_over(step, done, cmd.retry_of)
        state = cls(run, steps, policy, rand, tickets)
        effects: list[Effect] = []
        stamp = from_epoch(now)
        for step in steps:
            if state._due_to_queue(step):
                effects.extend(state.transitions.queue(step, 1, stamp))
            else:
                effects.append(PersistStep(step, "new"))
        # The run record goes last: it is the commit point of a new run (see effects.py).
        effects.append(PersistRun(run))
        return state, effects

    def _due_to_queue(self, step: StepRecord) -> bool:
        """Whether the step is due to be queued: pending, its dependencies succeeded, and
        the run admitted and not cancelled."""
        return (
            step.status == "pending"
            and not self.run.waiting
            and not self.run.cancel_requested
            and self.records.readiness.waiting(step.id) == 0
        )

    def admit(self, now: float) -> list[Effect]:
        """A waiting run's turn (services/orchestrator/admission.py): its first steps are
        queued. Nothing for a run admitted already, or ended while it waited."""
        if not self.run.waiting or self.done:
            return []
        self.run.waiting = False
        stamp = from_epoch(now)
        effects: list[Effect] = []
        for step in self.steps.values():
            if self._due_to_queue(step):
                effects.extend(self.transitions.queue(step, step.attempt + 1, stamp))
        return [*effects, PersistRun(self.run), *self.transitions.maybe_finish(stamp)]

    # ---- messages ----

    def _counted(
        self, kind: str, step_id: str, ticket: str, attempt: int, runner: str
    ) -> StepRecord | Refused:
        """The step a runner's event is about, if the event counts: the step is known, the
        ticket is the attempt's, and the attempt is current and that runner's. The one guard
        of ``on_started`` and ``on_finished``."""
        step = self.steps.get(step_id)
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
        if self.run.cancel_requested:
            effects.append(KillAttempt(ev.runner, step.id, ev.attempt, "cancelled", ev.ticket))
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

    def on_retry_due(self, step_id: str, attempt: int, now: float) -> list[Effect]:
        step = self.steps.get(step_id)
        if step is None:
            return [Ignored(step_id, "retry timer for an unknown step")]
        if step.status != "retrying" or step.attempt + 1 != attempt:
            return [
                Ignored(
                    step_id,
                    f"retry timer for attempt {attempt} ignored: step is "
                    f"{step.status} at attempt {step.attempt}",
                )
            ]
        return self.transitions.queue(step, attempt, from_epoch(now))

    def on_silent(self, step_id: str, attempt: int, reason: str, now: float) -> list[Effect]:
        """The watchdog's verdict: the attempt's runner is dead (or the runner-side deadline
        passed unreported). A retry, if any attempts remain, starts at once."""
        step = self.steps.get(step_id)
        if step is None or step.attempt != attempt or step.status not in ("queued", "running"):
            return [Ignored(step_id, f"watchdog verdict for attempt {attempt} ignored")]
        effects: list[Effect] = []
        if step.runner:
            effects.append(KillAttempt(step.runner, step.id, attempt, reason, step.ticket))
        if not step.attempts or step.attempts[-1].attempt != attempt:
            # Accepted but never started: the attempt still happened, and failed.
            step.attempts.append(AttemptRecord(attempt=attempt, runner=step.runner))
        stamp = from_epoch(now)
        self.records.close_attempt(step, stamp, None, reason)
        return effects + self.transitions.attempt_failed(step, reason, now, immediate=True)

    def on_lost(self, step_id: str, attempt: int, requeue: int, now: float) -> list[Effect]:
        """The backstop's finding: this queued attempt has no runner, no heartbeat and no
        ready message any more (lost with a broker that died). The same attempt is queued
        again under a new message id; it does not count as a try."""
        step = self.steps.get(step_id)
        if (
            step is None
            or step.status != "queued"
            or step.attempt != attempt
            or step.requeues != requeue
            or step.runner is not None
        ):
            return [Ignored(step_id, f"lost-assignment finding for attempt {attempt} ignored")]
        step.requeues += 1
        step.queued_at = from_epoch(now)
        step.offered_to = None
        ready, _ = self.records.ready_message(step)
        return [
            PersistStep(step, step.status),
            Requeued(step.id, attempt, step.requeues),
            enqueue(step, ready),
        ]

    @staticmethod
    def holds_ticket(step: StepRecord, ticket: str) -> bool:
        """Whether a message about the step's current attempt comes from the runner that was
        given it. Steps stored before tickets existed have none, and accept any."""
        return holds(step.ticket, ticket)

    def on_handoff_answer(
        self, step_id: str, attempt: int, requeue: int, runner: str, answer: HandoffAnswer
    ) -> list[Effect]:
        """What the runner an attempt was handed to answered. Accepted: it holds the attempt.
        Refused (busy, stopping, or not there): the attempt goes to the dispatchers. No answer:
        it may hold the attempt, so the dispatchers look for it before they offer it. Nothing
        if the attempt has moved on (its outcome came first, as a short step's does)."""
        step = self.steps.get(step_id)
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
            ready = msgspec.structs.replace(ready, check=True)
        return [enqueue(step, ready)]

    def on_heartbeat(
        self, step_id: str, attempt: int, runner: str, stored_at: str | None
    ) -> list[Effect]:
        """A heartbeat of the attempt's runner: the step shows when it was last heard (kept
        in memory and stored with the step's next record: a write per heartbeat would cost
        more than the display is worth), and a queued attempt learns its runner."""
        step = self.steps.get(step_id)
        if step is not None:
            step.last_heartbeat_at = stored_at
            self.chains.heard_going_on(step, attempt, runner)
        self.on_accepted(step_id, attempt, runner)
        return []

    def on_accepted(self, step_id: str, attempt: int, runner: str) -> None:
        """A heartbeat shows which runner holds a queued attempt (before it reported started),
        so a later verdict can fence that runner."""
        step = self.steps.get(step_id)
        if step is not None and step.status == "queued" and step.attempt == attempt:
            step.runner = runner

    def cancel(self, now: float) -> list[Effect]:
        if self.done or self.run.cancel_requested:
            return []
        self.run.cancel_requested = True
        effects: list[Effect] = [PersistRun(self.run)]
        stamp = from_epoch(now)
        for step in self.steps.values():
            if step.status in ("pending", "queued", "retrying"):
                # Handed to a runner, it may run there although it has not said so yet.
                holder = step.runner or step.offered_to
                if step.status == "queued" and holder:
                    effects.append(
                        KillAttempt(holder, step.id, step.attempt, "cancelled", step.ticket)
                    )
                effects.extend(self.transitions.terminate(step, "cancelled", "cancelled", stamp))
            elif step.status == "running" and step.runner:
                kill = KillAttempt(step.runner, step.id, step.attempt, "cancelled", step.ticket)
                effects.append(kill)
        return effects + self.transitions.maybe_finish(stamp)

    # ---- recovery ----

    def resume(self, now: float) -> list[Effect]:
        """Effects that make a run rebuilt from KV whole again after a crash, wherever the
        crash fell between storing a transition and sending what it implies. Each one is
        harmless if it was in fact sent: ready messages carry a message id, a re-sent retry
        timer replaces the pending one, and a duplicate attempt is fenced when it starts."""
        stamp = from_epoch(now)
        effects: list[Effect] = []
        if self.run.cancel_requested and not self.done:
            self.run.cancel_requested = False  # cancel again: finishes what a crash cut short
            effects.extend(self.cancel(now))
        for step in self.steps.values():
            if step.status == "queued" and step.offered_to:
                # Handed to a runner whose answer was lost with the previous owner: asked of
                # the dispatchers (with a look for it first) once that runner would have
                # answered, unless its events or heartbeat come first.
                effects.append(AwaitHandoff(step.id, step.attempt, step.requeues, step.offered_to))
            elif step.status == "queued":
                step.queued_at = step.queued_at or stamp
                effects.append(enqueue(step, self.records.ready_message(step)[0]))
            elif self._due_to_queue(step):
                effects.extend(self.transitions.queue(step, step.attempt + 1, stamp))
            elif step.status == "retrying":
                at = parse(step.retry_at).timestamp() if step.retry_at else now
                effects.append(ScheduleRetry(step.id, step.attempt + 1, at, max(at - now, 0.0)))
        return effects + self.transitions.maybe_finish(stamp)
