"""Continuing a chain (docs/latency.md): the steps a handed-off step takes along to its
runner, what the runner's outcome makes of them, and what voids them. A part of the run's
state machine (state.py), given the run's records (run_steps.py); pure: no I/O, no clock.
"""

from __future__ import annotations

import msgspec
from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    Continue,
    Effect,
    KillAttempt,
    PersistStep,
)
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.shared.core.labels import same_labels
from heddle.shared.wire.contracts import AttemptRecord, StepFinished, StepReady, StepRecord, encode

# How many steps of a chain a runner holds as continuations (Chains.prepare_next).
CONTINUATION_DEPTH = 3
# Who holds a continuation carried in its step's ready message: whichever runner a
# dispatcher gives that step (not a runner's name: those match names.ID_PATTERN).
ANY_RUNNER = "*"


class Chains:
    """The continuations of a run's steps."""

    def __init__(self, records: RunSteps) -> None:
        self.records = records
        # Continuations heard started (a heartbeat under their prepared ticket) while
        # pending: step -> (ticket, runner).
        self.went_on: dict[str, tuple[str, str]] = {}

    def chain_successor(self, step_id: str) -> StepRecord | None:
        """The first step never queued whose one parent is ``step_id``; none for a forEach
        step's instance (outside the graph), nor a forEach step (it expands, never runs)."""
        parents = self.records.graph.parents
        for child_id in self.records.graph.children.get(step_id, ()):
            child = self.records.steps[child_id]
            # By length first: a fan-in's parents are many, and every one asks.
            only = parents[child_id]
            if (
                child.status == "pending"
                and child.when is None  # decided once its dependency has ended, not before
                and child.for_each is None
                and child.workflow is None  # a call: it runs on no runner
                and child.approval is None  # a gate runs on no runner
                and not child.semaphores  # it asks for its slots before it may run
                and self.records.quota_semaphore() is None  # and for its namespace's
                and child.attempt == 0
                and len(only) == 1
                and only[0] == step_id
                # Asking for other labels, it may not be this runner's to take.
                and same_labels(child, self.records.steps[step_id])
            ):
                return child
        return None

    def prepare_next(self, step: StepRecord, runner: str, stamp: str) -> list[Effect]:
        """The continuations of ``step``'s current attempt, held by ``runner``: the next
        ``CONTINUATION_DEPTH`` steps of its chain, each one's first attempt to run on that
        runner the moment the one before succeeds there: three, so that the next is there
        before the runner needs it while the orchestrator hears of the one before. Those
        prepared already are kept as they are: the runner may hold them."""
        if not self.records.policy.continuations or self.records.stopping:
            return []
        effects: list[Effect] = []
        before, attempt = step, step.attempt
        for _ in range(CONTINUATION_DEPTH):
            child = self.chain_successor(before.id)
            if child is None:
                break
            if child.offered_to != runner or not child.ticket:
                prepared = self.prepare(child, before, attempt, runner, stamp)
                if not prepared:
                    break
                effects.extend(prepared)
            before, attempt = child, 1
        return effects

    def carried(
        self, step: StepRecord, ready: StepReady, stamp: str
    ) -> tuple[list[Effect], StepReady]:
        """``ready`` (``step``'s attempt, for the dispatchers) carrying its chain successor as
        its continuation (``then``), for whichever runner takes it, and the prepared
        record's write; ``ready`` as it was if there is none, or the two would not fit in
        one message. Not without handoff, as none is sent to a named runner without it."""
        if (
            not (self.records.policy.handoff and self.records.policy.continuations)
            or self.records.stopping
        ):
            return [], ready
        child = self.chain_successor(step.id)
        if child is None:
            return [], ready
        prepared = self.prepare(child, step, step.attempt, ANY_RUNNER, stamp)
        if not prepared:
            return [], ready
        persist, sent = prepared
        assert isinstance(sent, Continue)
        carrying = msgspec.structs.replace(ready, then=sent.ready)
        limit = self.records.policy.max_ready_bytes
        if limit and len(encode(carrying)) > limit:
            child.ticket, child.offered_to = "", None
            return [], ready
        return [persist], carrying

    def prepare(
        self, child: StepRecord, after: StepRecord, after_attempt: int, runner: str, stamp: str
    ) -> list[Effect]:
        """``child``'s first attempt as the continuation of ``after``'s (as given: its
        ticket): the child's ticket stored with its (still pending) record before it is
        sent."""
        child.ticket = self.records.new_ticket()
        child.offered_to = runner
        # Its first attempt, while the record stays pending (attempt 0), as it is.
        ready, too_large = self.records.ready_message(child, 1, ahead=True)
        if too_large:
            child.ticket, child.offered_to = "", None
            return []
        ready = msgspec.structs.replace(
            ready,
            ready_at=stamp,
            after=after.id,
            after_attempt=after_attempt,
            after_ticket=after.ticket,
        )
        return [PersistStep(child, child.status), Continue(ready, runner)]

    def take_continuation(
        self, step: StepRecord, ev: StepFinished, ready: list[str], stamp: str
    ) -> list[Effect]:
        """The continuation ``ev.runner`` started at ``step``'s success: queued there, as a
        handoff it accepted (looked for if neither its heartbeat nor its outcome comes
        within the assignment timeout), and its own successor prepared. Nothing if it is
        not the one prepared for that runner, or if the run no longer wants it."""
        child = self.records.steps.get(ev.continued)
        if (
            child is None
            or child.id not in ready
            or child.status != "pending"
            or child.attempt != 0
            or child.offered_to not in (ev.runner, ANY_RUNNER)
            or not child.ticket
            or child.ticket != ev.continued_ticket  # prepared anew since: not the one it ran
            or ev.outputs  # a runner continues only after a success without outputs
            or self.records.stopping
        ):
            return []
        self.went_on.pop(child.id, None)
        prev = child.status
        child.status = "queued"
        self.records.flying.add(child.id)
        child.attempt = 1
        child.offered_to = ev.runner  # prepared for any runner, if carried: that one has it
        child.runner = None
        child.queued_at = stamp
        child.requeues = 0
        return [
            PersistStep(child, prev),
            AwaitHandoff(child.id, 1, 0, ev.runner, continued=True),
            *self.prepare_next(child, ev.runner, stamp),
        ]

    def not_continued(self, ev: StepFinished, why: str) -> list[Effect]:
        """A continuation the runner started that does not count: fenced like any such
        attempt (the runner kills it if it still runs it)."""
        if not ev.continued:
            return []
        reason = f"continuation not taken: {why}"
        return [KillAttempt(ev.runner, ev.continued, 1, reason, ev.continued_ticket)]

    def reported_early(self, step: StepRecord, attempt: int, runner: str) -> bool:
        """An event of a prepared continuation (its ticket, checked) handled before the
        outcome of the step it follows, which was stored first but delivered later (a
        redelivery after a failover): not fenced, but heard as started. The outcome that
        names it takes it; its own outcome, stored, is applied once it is queued."""
        return self.heard_going_on(step, attempt, runner)

    def heard_going_on(self, step: StepRecord, attempt: int, runner: str) -> bool:
        """A heartbeat (or event) of a continuation still pending, under its prepared ticket
        (checked by the caller): ``runner`` started it before the outcome of the one it
        follows was stored, as it does when every start is made known at once. Whether it
        was one."""
        if step.status == "pending" and step.offered_to and step.ticket and attempt == 1:
            self.went_on[step.id] = (step.ticket, runner)
            return True
        return False

    def unprepare(self, step: StepRecord, stamp: str) -> list[Effect]:
        """``step``'s attempt ended without a continuation: what was prepared after it is
        void, down its chain. One heard started keeps its attempt number (spent)."""
        effects: list[Effect] = []
        todo = list(self.records.graph.children.get(step.id, ()))
        while todo:
            child = self.records.steps[todo.pop()]
            if child.status == "pending" and child.offered_to:
                went_on = self.went_on.pop(child.id, None)
                if went_on is not None and went_on[0] == child.ticket:
                    effects.extend(self.spend(child, went_on[1], stamp))
                child.offered_to, child.ticket = None, ""
                todo.extend(self.records.graph.children[child.id])
        return effects

    def spend(self, child: StepRecord, runner: str, stamp: str) -> list[Effect]:
        """A void continuation its runner started: its runner died (or was judged silent)
        before the outcome naming it was stored, and the command may have run there. Its
        attempt counts, as one whose runner died under it does, so the next is the second:
        no attempt number runs twice."""
        [after] = self.records.graph.parents[child.id]
        reason = f"void: started on runner {runner} to follow {after}, which ended unheard"
        child.attempt = 1
        child.attempts.append(
            AttemptRecord(attempt=1, runner=runner, finished_at=stamp, reason=reason)
        )
        kill = KillAttempt(runner, child.id, 1, reason, child.ticket)  # as it was prepared
        return [PersistStep(child, child.status), kill]
