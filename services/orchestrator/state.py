"""A run's state machine: every step and run transition Heddle makes. This file holds the
run's own decisions (its making, its admission, its cancellation, its deadline, the
watchdog's and the backstop's findings, its recovery); it is composed of the run's records
(``run_steps.py``), its chains (``continuations.py``), a step's transitions
(``transitions.py``, a forEach step's loop among them: ``loops.py``) and what its attempts'
runners report (``attempt_reports.py``), each an object of its own that the next is given. A
new run's records are made by ``new_run.py``.

Pure: each method takes a message (and the time) and returns the effects to carry out, in
order; the run actor performs them. Nothing here awaits, touches NATS, or reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from heddle.services.orchestrator.attempt_reports import AttemptReports, HandoffAnswer
from heddle.services.orchestrator.continuations import Chains
from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    Effect,
    Ignored,
    KillAttempt,
    OpenGate,
    PersistRun,
    PersistStep,
    Requeued,
    ScheduleRetry,
)
from heddle.services.orchestrator.gate_answers import GateAnswers
from heddle.services.orchestrator.key_answers import KeyAnswers
from heddle.services.orchestrator.new_run import new_records
from heddle.services.orchestrator.run_steps import Policy, RunSteps
from heddle.services.orchestrator.slot_answers import SlotAnswers
from heddle.services.orchestrator.stopping import Stopping
from heddle.services.orchestrator.transitions import StepTransitions, enqueue, skip_reason
from heddle.shared.core.tickets import holds, new_ticket
from heddle.shared.wire.contracts import AttemptRecord, RunRecord, StepRecord, SubmitRun
from heddle.shared.wire.timefmt import from_epoch, parse

__all__ = ["HandoffAnswer", "Policy", "RunState"]


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
        self.reports = AttemptReports(self.records, self.chains, self.transitions)
        self.stopping = Stopping(self.records, self.transitions)
        self.on_deadline = self.stopping.on_deadline
        self.cancel = self.stopping.cancel
        # What the attempts' runners report is answered there, called as the run's own
        # methods with no call in between (a step's outcome is one of them).
        self.on_started = self.reports.on_started
        self.on_finished = self.reports.on_finished
        self.on_heartbeat = self.reports.on_heartbeat
        self.on_accepted = self.reports.on_accepted
        self.on_handoff_answer = self.reports.on_handoff_answer
        # A step's semaphores: the answer to a take, a slot freed for it (slot_answers.py).
        self.slots = SlotAnswers(self.records, self.transitions)
        self.on_slots = self.slots.on_slots
        self.on_slot_free = self.slots.on_slot_free
        # The run's concurrency key: asked for, answered, its turn (key_answers.py).
        self.keys = KeyAnswers(self.records, self.transitions, self.stopping, self.admit)
        self.on_key_taken = self.keys.on_key_taken
        self.on_quota_taken = self.keys.on_quota_taken
        self.on_key_free = self.keys.on_key_free
        # A call step's child ended (call_steps.py).
        self.on_child_ended = self.transitions.calls.on_child_ended
        # Approval gates: their answers and their timeouts (gate_answers.py).
        self.gates = GateAnswers(self.records, self.transitions)
        self.on_gate_decided = self.gates.on_decision

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
        runs_quota: bool = False,
    ) -> tuple[RunState, list[Effect]]:
        """The run's records to store, its first steps queued; or, not ``admitted`` (the
        runs under way at their bound) or with its namespace's ``runs_quota`` or a
        concurrency key to take first, stored waiting, every step pending until ``admit``."""
        run, steps = new_records(cmd, policy, admitted, now, runs_quota)
        state = cls(run, steps, policy, rand, tickets)
        effects: list[Effect] = []
        stamp = from_epoch(now)
        decided: set[str] = set()  # queued or ended already by a decision: stored with it
        for step in steps:
            if step.id in decided:
                continue
            due = state.transitions.start_if_due(step, stamp)
            if due is None or (not due and step.status == "pending"):  # not due, or held
                effects.append(PersistStep(step, "new"))
            else:  # the run record goes last, below, a forEach step's expansion or not
                effects.extend(e for e in due if not isinstance(e, PersistRun))
                # A successor prepared to follow (still pending) is stored as new as well.
                decided.update(
                    e.step.id
                    for e in due
                    if isinstance(e, PersistStep) and e.step.status != "pending"
                )
        # Every step may have ended already (skipped by its condition): the run ends with them,
        # stored by the one record below.
        ends = state.transitions.maybe_finish(stamp)
        effects.extend(e for e in ends if not isinstance(e, PersistRun))
        # The run record goes last: it is the commit point of a new run (see effect_writes.py).
        # Its gates' records and timers, its deadline's timer and its key's take follow,
        # once the run is stored: a submit of a run that exists must not touch that run's.
        after = [e for e in effects if isinstance(e, OpenGate | ScheduleRetry)]
        effects = [e for e in effects if not isinstance(e, OpenGate | ScheduleRetry)]
        effects.append(PersistRun(run))
        return state, effects + after + state.stopping.deadline_timer(now) + state.keys.asking()

    def release(self, now: float) -> list[Effect]:
        """The ready steps the run's window held back, queued while it has room: asked by
        the actor after every message, whatever freed a place (docs/pools.md, "Fair
        turns")."""
        if not self.records.held or self.done:
            return []
        return self.transitions.release(from_epoch(now))

    def admit(self, now: float) -> list[Effect]:
        """A waiting run's turn (services/orchestrator/admission.py): its first steps are
        queued. Nothing for a run admitted already, or ended while it waited."""
        if not self.run.waiting or self.done:
            return []
        self.run.waiting = False
        stamp = from_epoch(now)
        effects: list[Effect] = []
        for step in list(self.steps.values()):  # a forEach step's expansion adds steps
            effects.extend(self.transitions.start_if_due(step, stamp) or ())
        return [*effects, PersistRun(self.run), *self.transitions.maybe_finish(stamp)]

    # ---- the run's own findings ----

    def on_retry_due(self, step_id: str, attempt: int, now: float) -> list[Effect]:
        step = self.steps.get(step_id)
        if step is None:
            return [Ignored(step_id, "retry timer for an unknown step")]
        if self.gates.waiting_gate(step_id, attempt) is not None:
            return self.gates.on_timeout(step, now)  # a gate's timer is its timeout
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
        if (
            step is None
            or step.attempt != attempt
            or step.status not in ("queued", "running")
            or step.for_each is not None  # it runs as its instances, on no runner
            or step.workflow is not None  # its child runs, on no runner
        ):
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

    def on_no_runner(self, step_id: str, attempt: int, reason: str, now: float) -> list[Effect]:
        """No runner can take this queued attempt: it fails for good, its retries unspent,
        since no retry would find one either (its ready message is purged first)."""
        step = self.steps.get(step_id)
        if step is None or step.attempt != attempt or step.status != "queued":
            return [Ignored(step_id, f"no-runner verdict for attempt {attempt} ignored")]
        step.attempts.append(AttemptRecord(attempt=attempt))
        stamp = from_epoch(now)
        self.records.close_attempt(step, stamp, None, reason)
        return self.transitions.fail(step, reason, stamp, step.status)

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

    # ---- recovery ----

    def _ended_parent(self, step: StepRecord) -> StepRecord | None:
        """A dependency that ended without success, for a plain pending step of a run going
        on; that step should have been skipped with it."""
        if (
            step.status != "pending"
            or step.when is not None
            or step.parent is not None  # a forEach instance: its loop's (loops.py)
            or self.records.halted(step)
        ):
            return None
        for parent_id in self.records.graph.parents[step.id]:
            parent = self.steps[parent_id]
            if parent.status in ("failed", "skipped", "cancelled"):
                return parent
        return None

    def resume(self, now: float) -> list[Effect]:
        """Effects that make a run rebuilt from KV whole again after a crash, wherever the
        crash fell between storing a transition and sending what it implies. Each one is
        harmless if it was in fact sent: ready messages carry a message id, a re-sent retry
        timer replaces the pending one, and a duplicate attempt is fenced when it starts."""
        stamp = from_epoch(now)
        effects: list[Effect] = []
        if self.run.cancel_requested and not self.done:
            # Cancelled again, as often as it was: finishes what a crash cut short.
            twice = self.run.exit_cancelled
            self.run.cancel_requested = self.run.exit_cancelled = False
            reason, self.run.reason = self.run.reason, None
            effects.extend(self.cancel(now, reason))
            if twice:
                effects.extend(self.cancel(now))
        elif self.records.stopping and not self.done:
            # Past its deadline: stopped again (its exit handlers run after), and cancelled
            # again if its exit handlers were.
            effects.extend(self.stopping.stop(stamp, self.records.main_steps()))
            if self.run.exit_cancelled:
                effects.extend(self.stopping.stop(stamp, self.records.exit_steps()))
        elif self.stopping.deadline_passed(now):
            effects.extend(self.on_deadline(now))  # passed while no orchestrator held the run
        else:
            # One to come is scheduled again: the same schedule replaces the pending one.
            effects.extend(self.stopping.deadline_timer(now))
        for step in list(self.steps.values()):  # a forEach step's expansion adds steps
            if step.status == "queued" and step.offered_to:
                # Handed to a runner whose answer was lost with the previous owner: asked of
                # the dispatchers (with a look for it first) once that runner would have
                # answered, unless its events or heartbeat come first.
                effects.append(AwaitHandoff(step.id, step.attempt, step.requeues, step.offered_to))
            elif step.status == "running" and step.workflow is not None:
                effects.extend(self.transitions.calls.again(step))  # its child's submit
            elif step.status == "queued":
                step.queued_at = step.queued_at or stamp
                effects.append(enqueue(step, self.records.ready_message(step)[0]))
            elif (due := self.transitions.start_if_due(step, stamp)) is not None:
                effects.extend(due)
            elif (cause := self._ended_parent(step)) is not None:
                # A dependency's end was stored, this step's skip not: the crash fell between.
                effects.extend(
                    self.transitions.terminate(step, "skipped", skip_reason(cause), stamp)
                )
                effects.extend(self.transitions.end_downstream(step, stamp))
            elif step.status == "retrying":
                at = parse(step.retry_at).timestamp() if step.retry_at else now
                effects.append(ScheduleRetry(step.id, step.attempt + 1, at, max(at - now, 0.0)))
        # The loops under way: their ends a crash kept unstored, and their next instances.
        effects.extend(self.transitions.loops.resume(stamp))
        effects.extend(self.gates.resume(now))  # the gates' timeouts
        # A run waiting for its concurrency key asks again: its take may not have been made.
        return effects + self.transitions.maybe_finish(stamp) + self.keys.asking()
