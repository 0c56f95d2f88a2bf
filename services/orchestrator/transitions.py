"""A step's transitions within its run, a part of the run's state machine (state.py): queued
with its ready message, succeeded (readying what it was waited for by), failed (retried, or
for good, skipping what is downstream), terminal, and the run's end once every step is.
Given the run's records (run_steps.py) and its chains (continuations.py). Pure: no I/O, no
clock.
"""

from __future__ import annotations

from heddle.services.orchestrator.call_steps import CallSteps
from heddle.services.orchestrator.continuations import Chains
from heddle.services.orchestrator.decisions import (
    Effect,
    Enqueue,
    PersistRun,
    PersistStep,
    ScheduleRetry,
    TakeSlots,
)
from heddle.services.orchestrator.gates import open_gate
from heddle.services.orchestrator.loops import Loops
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.shared.core.backoff import backoff
from heddle.shared.core.dag import doomed
from heddle.shared.core.expressions import (
    ExpressionError,
    compile_expression,
    evaluate_condition,
)
from heddle.shared.core.labels import same_labels
from heddle.shared.core.quotas import with_quota
from heddle.shared.wire.contracts import (
    AttemptRecord,
    StepFinished,
    StepReady,
    StepRecord,
    StepStatus,
)
from heddle.shared.wire.timefmt import from_epoch


def enqueue(step: StepRecord, ready: StepReady, handoff: str | None = None) -> Enqueue:
    # A forEach instance has no dependencies, but its run is under way.
    return Enqueue(ready, handoff, opens=not step.depends_on and step.parent is None)


def skip_reason(cause: StepRecord) -> str:
    """Why a step is skipped: ``cause``, a step it depends on, ended without success."""
    how = "failed" if cause.status == "failed" else f"was {cause.status}"
    return f"skipped because step {cause.id} {how}"


def is_queued(step: StepRecord) -> bool:
    """Asked after ``queue`` may have changed the step (or failed it: too large), where a
    comparison inline would keep the type checker's narrowing from before the call."""
    return step.status == "queued"


class StepTransitions:
    """What happens to a step, and to its run when the step ends."""

    def __init__(self, records: RunSteps, chains: Chains) -> None:
        self.records = records
        self.chains = chains
        self.loops = Loops(records, self)
        self.calls = CallSteps(records, self)

    def queue(
        self,
        step: StepRecord,
        attempt: int,
        stamp: str,
        handoff: str | None = None,
        *,
        granted: bool = False,
    ) -> list[Effect]:
        """``granted``: the step holds every slot of its semaphores now; without, a step
        with semaphores not queued or running already asks for them first, and waits."""
        if step.for_each is not None:
            return self.loops.expand(step, stamp)  # it runs as its instances
        if step.workflow is not None:
            return self.calls.start(step, attempt, stamp)  # its child runs, on no runner
        if step.approval is not None:
            return open_gate(self.records, step, attempt, stamp)  # on no runner, no slot
        prev = step.status
        if prev == "pending" and handoff is None and not granted and self.records.window_full():
            self.records.held.append(step.id)  # its turn comes as the run's steps land
            return []
        if not granted and prev not in ("queued", "running") and step.semaphore_wait is None:
            step.semaphores = with_quota(step.semaphores, self.records.quota_semaphore())
        if step.semaphores and not granted and prev not in ("queued", "running"):
            return self.wait_for_slots(step, stamp)
        step.status = "queued"
        self.records.flying.add(step.id)
        step.attempt = attempt
        step.runner = None
        step.queued_at = stamp
        step.retry_at = None
        step.started_at = step.finished_at = step.exit_code = None
        step.requeues = 0
        step.ticket = self.records.new_ticket()
        # Prepared to follow its attempt as given before, if ever.
        spent = self.chains.unprepare(step, stamp)
        ready, too_large = self.records.ready_message(step)
        if too_large:
            # No runner could be given it, and another try would be as large.
            step.attempts.append(AttemptRecord(attempt=attempt))
            self.records.close_attempt(step, stamp, None, too_large)
            return spent + self.fail(step, too_large, stamp, prev)
        # Stored with the queued record, so that whoever rebuilds the run knows a runner
        # may hold the attempt although no ready message of it is in the stream.
        step.offered_to = handoff
        if handoff is not None:
            return [
                *spent,
                PersistStep(step, prev),
                enqueue(step, ready, handoff),
                *self.chains.prepare_next(step, handoff, stamp),
            ]
        # The prepared successor's record goes before the message that carries it.
        prepared, ready = self.chains.carried(step, ready, stamp)
        return [*spent, *prepared, PersistStep(step, prev), enqueue(step, ready)]

    def release(self, stamp: str) -> list[Effect]:
        """The held steps queued, in the order they became ready, while the window has room;
        those the run ended meanwhile (skipped, cancelled, their loop failed) are let go."""
        records = self.records
        effects: list[Effect] = []
        while records.held and not records.window_full():
            step = records.steps[records.held.popleft()]
            if step.status != "pending" or records.halted(step) or records.run.waiting:
                continue
            if step.parent is not None and records.steps[step.parent].status != "running":
                continue
            effects.extend(self.queue(step, step.attempt + 1, stamp))
        return effects

    def wait_for_slots(self, step: StepRecord, stamp: str) -> list[Effect]:
        """A step due but for its semaphores: pending, waiting (for the first of them until
        the answer says which), while their slots are asked for (docs/pools.md)."""
        prev = step.status
        names = tuple(sorted(step.semaphores))
        step.status = "pending"
        step.retry_at = None
        step.offered_to = None
        step.semaphore_wait = step.semaphore_wait or names[0]
        return [PersistStep(step, prev), TakeSlots(step.id, step.attempt + 1, names, stamp)]

    def succeed(
        self,
        step: StepRecord,
        stamp: str,
        by: str | None = None,
        outcome: StepFinished | None = None,
    ) -> list[Effect]:
        """``by``: the runner that succeeded, now free; the first step this readies is
        handed to it (with the policy's handoff), the others go to the dispatchers. If
        ``outcome`` names a continuation ``by`` started, that one is queued on it instead,
        as a handoff it accepted."""
        if step.parent is not None:
            return self.loops.instance_succeeded(step, stamp)
        prev = step.status
        step.status = "succeeded"
        step.reason = None
        self.records.ended(step)
        self.records.succeeded.add(step.id)
        if step.outputs:
            self.records.with_outputs.add(step.id)
        ready = self.records.readiness.succeed(step.id)
        effects: list[Effect] = [PersistStep(step, prev)]
        handoff = by if self.records.policy.handoff else None
        if outcome is not None and outcome.continued:
            taken = self.chains.take_continuation(step, outcome, ready, stamp)
            if taken:
                effects.extend(taken)
                handoff = None  # one runner, one step
            else:
                effects.extend(self.chains.not_continued(outcome, "it was not prepared"))
        for child_id in ready:
            child = self.records.steps[child_id]
            if child.status != "pending" or self.records.halted(child):
                continue
            # Handed only to a runner sure to take it: one that took the same labels.
            to = handoff if same_labels(child, step) else None
            if child.when is not None:
                effects.extend(self.decide(child, stamp, to))
            else:  # past an attempt a void continuation spent, if one did
                effects.extend(self.queue(child, child.attempt + 1, stamp, to))
            if to is not None and is_queued(child):
                handoff = None  # one runner, one step
        return effects + self.maybe_finish(stamp)

    def start_if_due(self, step: StepRecord, stamp: str) -> list[Effect] | None:
        """The effects that start a step now due, or None if it is not: pending, the run
        admitted and not stopping it, an exit handler's workflow steps all ended, and its
        dependencies succeeded (queued), or, for a conditional step, ended (decided)."""
        records = self.records
        if step.status != "pending" or records.run.waiting or records.halted(step):
            return None
        if step.parent is not None:
            return None  # a forEach instance: its step's loop queues it
        if step.on_exit and records.main_left:
            return None
        unsettled = records.readiness.unsettled(step.id)
        if unsettled is None:
            if records.readiness.waiting(step.id):
                return None
            return self.queue(step, step.attempt + 1, stamp)
        return self.decide(step, stamp) if unsettled == 0 else None

    def decide(self, step: StepRecord, stamp: str, handoff: str | None = None) -> list[Effect]:
        """A conditional step whose every dependency has ended: queued if its ``when`` holds,
        skipped if not, failed if it cannot be evaluated; what ends it ends what it dooms."""
        ended: list[StepRecord] = []
        effects = self.decision(step, stamp, handoff, ended)
        return effects + self.end_downstream(step, stamp) if ended else effects

    def decision(
        self, step: StepRecord, stamp: str, handoff: str | None, ended: list[StepRecord]
    ) -> list[Effect]:
        """``decide`` without what follows: a step it ends is added to ``ended``."""
        try:
            holds = evaluate_condition(
                compile_expression(step.when or ""),
                self.records.condition_scope(step.id, step.when or ""),
            )
        except ExpressionError as exc:
            ended.append(step)
            return self.terminate(step, "failed", f"when {exc.problem}", stamp)
        if holds:
            return self.queue(step, step.attempt + 1, stamp, handoff)
        ended.append(step)
        return self.terminate(step, "skipped", f"skipped: when {step.when!r} is false", stamp)

    def attempt_failed(
        self, step: StepRecord, reason: str, now: float, *, immediate: bool
    ) -> list[Effect]:
        stamp = from_epoch(now)
        spent = self.chains.unprepare(step, stamp)
        if self.records.halted(step):
            why = self.records.stop_reason
            return spent + self.terminate(step, "cancelled", why, stamp) + self.maybe_finish(stamp)
        if step.attempt <= step.retries:
            next_attempt = step.attempt + 1
            if immediate:
                return spent + self.queue(step, next_attempt, stamp)
            delay = backoff(
                step.attempt,
                self.records.policy.retry_base,
                self.records.policy.retry_cap,
                self.records.rand,
            )
            prev = step.status
            step.status = "retrying"
            self.records.landed(step)
            step.reason = reason
            step.retry_at = from_epoch(now + delay)
            return [
                *spent,
                PersistStep(step, prev),
                ScheduleRetry(step.id, next_attempt, now + delay, delay),
            ]
        return spent + self.fail(step, reason, stamp, step.status)

    def fail(self, step: StepRecord, reason: str, stamp: str, prev: str) -> list[Effect]:
        """The step fails for good: every step downstream of it is skipped, but for one with
        a condition, which is decided once all its dependencies have ended."""
        if step.parent is not None:
            return self.loops.instance_failed(step, reason, stamp, prev)
        effects = self.terminate(step, "failed", reason, stamp, prev)
        return effects + self.end_downstream(step, stamp) + self.maybe_finish(stamp)

    def end_downstream(self, origin: StepRecord, stamp: str) -> list[Effect]:
        """``origin`` ended without success: the steps it dooms are skipped, and the
        conditional steps whose dependencies have all ended now are decided (which may end
        more, in turn)."""
        records = self.records
        steps, readiness = records.steps, records.readiness
        effects: list[Effect] = []
        ended = [origin]
        while ended:
            cause = ended.pop()
            why = skip_reason(cause)
            gone = [cause]
            for victim_id, _parent in doomed(records.graph, cause.id, records.conditional):
                victim = steps[victim_id]
                if victim.status == "pending":
                    effects.extend(self.terminate(victim, "skipped", why, stamp))
                    gone.append(victim)
            if not records.conditional:
                continue
            for step in gone:
                for child_id in readiness.end(step.id):
                    child = steps[child_id]
                    if child.status == "pending" and not records.halted(child):
                        effects.extend(self.decision(child, stamp, None, ended))
        return effects

    def terminate(
        self,
        step: StepRecord,
        status: StepStatus,
        reason: str,
        stamp: str,
        prev: str | None = None,
    ) -> list[Effect]:
        prev = step.status if prev is None else prev
        step.status = status
        step.reason = reason
        step.retry_at = None
        step.semaphore_wait = None  # its place in line is given back with it (giving_back)
        if step.finished_at is None or prev in ("pending", "queued", "retrying"):
            step.finished_at = stamp
        self.records.ended(step)
        return [PersistStep(step, prev)]

    def maybe_finish(self, stamp: str) -> list[Effect]:
        """The run's end once every step has ended; once the workflow's steps have, its exit
        handlers' start."""
        records = self.records
        if records.done:
            return []
        effects: list[Effect] = []
        if records.exits and not records.main_left and records.terminal < len(records.steps):
            for step_id in records.exits:
                effects.extend(self.start_if_due(records.steps[step_id], stamp) or ())
        if records.terminal < len(records.steps):
            return effects
        records.run.status = records.outcome()
        records.run.finished_at = stamp
        return [*effects, *self.calls.tell_parent(stamp), PersistRun(records.run)]
