"""An approval gate's start, a part of the run's state machine (docs/approvals.md): a step
with ``approval`` that its dependencies let start waits (``waiting``), holding no runner,
no slot and no place in the run's window, while its record in heddle-approvals waits for
an answer; with ``timeoutSeconds``, a timer (the retry timer of its attempt) ends it.
What the answer does is gate_answers.py's. Pure: no I/O, no clock.
"""

from __future__ import annotations

from heddle.services.orchestrator.decisions import Effect, OpenGate, PersistStep, ScheduleRetry
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.shared.wire.contracts import ApprovalGate, RunRecord, StepRecord
from heddle.shared.wire.timefmt import epoch_of, from_epoch


def gate_deadline(step: StepRecord, now: float) -> float | None:
    """When a waiting gate times out (epoch seconds), counted from when it began waiting."""
    if step.approval is None or step.approval.timeout_seconds is None:
        return None
    return epoch_of(step.started_at or "", now) + step.approval.timeout_seconds


def gate_record(run: RunRecord, step: StepRecord, now: float) -> ApprovalGate:
    """The gate's record in heddle-approvals, as the orchestrator writes it (no decision)."""
    assert step.approval is not None  # a gate's alone
    deadline = gate_deadline(step, now)
    return ApprovalGate(
        run_id=run.run_id,
        step_id=step.id,
        attempt=step.attempt,
        message=step.approval.message,
        since=step.started_at or from_epoch(now),
        deadline_at=None if deadline is None else from_epoch(deadline),
        workflow_name=run.workflow_name,
    )


def timeout_timer(step: StepRecord, now: float) -> list[Effect]:
    """The timer that times out a waiting gate, if it has a timeout (once due: at once)."""
    at = gate_deadline(step, now)
    if at is None:
        return []
    return [ScheduleRetry(step.id, step.attempt, at, max(at - now, 0.0))]


def open_gate(records: RunSteps, step: StepRecord, attempt: int, stamp: str) -> list[Effect]:
    """The gate starts waiting: its record stored, then its gate's, then its timer."""
    prev = step.status
    step.status = "waiting"
    step.attempt = attempt
    step.started_at = stamp
    step.finished_at = step.retry_at = None
    step.decision = None
    now = epoch_of(stamp, 0.0)
    return [
        PersistStep(step, prev),
        OpenGate(gate_record(records.run, step, now)),
        *timeout_timer(step, now),
    ]
