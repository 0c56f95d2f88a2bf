"""What ends an approval gate, a part of the run's state machine (state.py): its answer
(approved: it succeeds; rejected: it fails, as a step with no retries left), or its time
running out (it fails, answered by ``timeout``). A gate is answered once: an answer for a
gate no longer waiting, or for another attempt, changes nothing. Its start is gates.py's;
its record in heddle-approvals is closed with it (decisions.giving_back). A run stopping
cancels a waiting gate as a pending step (stopping.py). Pure: no I/O, no clock.
"""

from __future__ import annotations

from heddle.services.orchestrator.decisions import Effect, Ignored
from heddle.services.orchestrator.gates import gate_deadline, timeout_timer
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.services.orchestrator.transitions import StepTransitions
from heddle.shared.core.approvals import TIMED_OUT
from heddle.shared.wire.contracts import ApprovalDecision, StepRecord
from heddle.shared.wire.timefmt import from_epoch


def rejection(decision: ApprovalDecision) -> str:
    """The reason of a gate that did not pass: who rejected it and why, or its timeout."""
    if decision.by == TIMED_OUT:
        return decision.comment
    said = f": {decision.comment}" if decision.comment else ""
    return f"rejected by {decision.by}{said}"


class GateAnswers:
    def __init__(self, records: RunSteps, transitions: StepTransitions) -> None:
        self.records = records
        self.transitions = transitions

    def waiting_gate(self, step_id: str, attempt: int) -> StepRecord | None:
        step = self.records.steps.get(step_id)
        if step is None or step.approval is None:
            return None
        return step if step.status == "waiting" and step.attempt == attempt else None

    def on_decision(
        self, step_id: str, attempt: int, decision: ApprovalDecision, now: float
    ) -> list[Effect]:
        """The gate's answer, as the gateway stored it: the step ends as it says."""
        step = self.waiting_gate(step_id, attempt)
        if step is None:
            return [Ignored(step_id, f"approval answer for attempt {attempt} ignored")]
        stamp = from_epoch(now)
        step.decision = decision
        step.finished_at = stamp
        if decision.approved:
            step.reason = None
            return self.transitions.succeed(step, stamp)
        return self.transitions.fail(step, rejection(decision), stamp, step.status)

    def on_timeout(self, step: StepRecord, now: float) -> list[Effect]:
        """The gate's timer: past its time, it fails; a timer that came early is set again."""
        at = gate_deadline(step, now)
        if at is None:
            return [Ignored(step.id, "timeout of a gate with no timeoutSeconds ignored")]
        if now < at:
            return timeout_timer(step, now)
        assert step.approval is not None and step.approval.timeout_seconds is not None
        why = f"approval timed out after {step.approval.timeout_seconds:g} s"
        answer = ApprovalDecision(
            approved=False, by=TIMED_OUT, decided_at=from_epoch(now), comment=why
        )
        return self.on_decision(step.id, step.attempt, answer, now)

    def resume(self, now: float) -> list[Effect]:
        """The timers of the gates still waiting, after a restart: the same schedule
        replaces the one pending, and a time passed meanwhile fires at once."""
        effects: list[Effect] = []
        for step in self.records.steps.values():
            if step.status == "waiting" and step.approval is not None:
                effects.extend(timeout_timer(step, now))
        return effects
