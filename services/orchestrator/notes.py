"""The orchestrator's decisions, written into the step's own log as transition notes.

A runner writes what it sees (started, succeeded, failed: reason, timed out,
cancelled); the orchestrator writes what only it decides: killed by the watchdog, retrying in
N ms (attempt k of n), skipped because an upstream step failed, cancelled. Together a step's
log is a complete account of its life, even when the command printed nothing or its runner
died.

Notes are derived here, purely, from the effects the state machine already returns (the
state machine does not change): a step's status before and after one message, the kill
requests and the retry timer of the same batch. Each note is a ``LogLine`` with stream
``heddle`` and ``seq`` 0 on ``names.log(..., NOTES_WRITER)``. Seq 0 cannot collide with
a runner's lines (1, 2, ... per attempt); readers order every line by its stream sequence,
which is the order the server stored them in. A note goes into the log of the attempt it is
about; a step that never got an attempt (skipped, or cancelled while pending) logs under
attempt 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heddle.services.orchestrator.decisions import (
    Effect,
    KillAttempt,
    PersistStep,
    Requeued,
    ScheduleRetry,
)
from heddle.services.orchestrator.gate_answers import rejection
from heddle.shared.core.namespaces import own_name
from heddle.shared.wire.contracts import ApprovalDecision, StepRecord

ACTIVE = ("queued", "running")
CANCEL_REASON = "cancelled"


@dataclass(frozen=True, slots=True)
class Note:
    step_id: str
    attempt: int
    text: str


@dataclass(slots=True)
class _Batch:
    """What one batch of effects says about each step."""

    before: dict[str, str] = field(default_factory=dict)  # status before (first write wins)
    steps: dict[str, StepRecord] = field(default_factory=dict)  # the record, final state
    kills: dict[tuple[str, int], KillAttempt] = field(default_factory=dict)
    timers: dict[str, ScheduleRetry] = field(default_factory=dict)
    requeued: list[Requeued] = field(default_factory=list)

    @classmethod
    def of(cls, effects: list[Effect]) -> _Batch:
        batch = cls()
        for eff in effects:
            match eff:
                case PersistStep(step=step, previous=previous):
                    batch.before.setdefault(step.id, previous)
                    batch.steps[step.id] = step
                case KillAttempt():
                    batch.kills[(eff.step_id, eff.attempt)] = eff
                case ScheduleRetry():
                    batch.timers[eff.step_id] = eff
                case Requeued():
                    batch.requeued.append(eff)
        return batch


def transition_notes(effects: list[Effect]) -> list[Note]:
    """The notes one batch of effects calls for, in order."""
    batch = _Batch.of(effects)
    notes: list[Note] = [
        Note(
            r.step_id,
            r.attempt,
            f"queued again: no runner holds attempt {r.attempt} and its ready message is gone",
        )
        for r in batch.requeued
    ]
    explained: set[tuple[str, int]] = set()  # kills a note already tells
    again = {r.step_id for r in batch.requeued}
    for step_id, step in batch.steps.items():
        was, now = batch.before[step_id], step.status
        if step_id in again and was == now == "queued":
            continue  # the same attempt queued again: its note is above
        if step.workflow is not None and was != now and now in ("running", "succeeded"):
            notes.append(_call_note(step))
        elif was in ACTIVE and now in ("retrying", "queued", "failed"):
            notes += _attempt_ended(step, batch, explained)
        elif now == "skipped" and was != now:
            notes.append(Note(step_id, step.attempt, step.reason or "skipped"))
        elif now == "cancelled" and was != now:
            notes.append(Note(step_id, step.attempt, _cancelled(step)))
        elif now == "waiting" and was != now and step.approval is not None:
            text = f"waiting for an answer: {step.approval.message}"
            notes.append(Note(step_id, step.attempt, text))
        elif was == "waiting" and now in ("succeeded", "failed") and step.decision is not None:
            notes.append(Note(step_id, step.attempt, _answered(step.decision)))
    return _kill_requests(batch.kills, explained) + notes


def _attempt_ended(step: StepRecord, batch: _Batch, explained: set[tuple[str, int]]) -> list[Note]:
    """An active attempt ended: killed, and retrying (later or now) or failed for good."""
    now, of = step.status, step.retries + 1
    # The attempt that ended: an immediate requeue has already moved to the next one.
    k = step.attempt - 1 if now == "queued" else step.attempt
    notes: list[Note] = []
    kill = batch.kills.get((step.id, k))
    if kill is not None or now == "queued":
        # Only the watchdog both fences an attempt and ends it, and only its verdicts
        # retry at once.
        reason = kill.reason if kill is not None else _attempt_reason(step, k)
        notes.append(Note(step.id, k, f"killed by the watchdog: {reason}"))
        explained.add((step.id, k))
    if now == "retrying":
        timer = batch.timers.get(step.id)
        wait = f" in {round(timer.delay * 1000)} ms" if timer is not None else ""
        notes.append(Note(step.id, k, f"retrying{wait} (attempt {k + 1} of {of})"))
    elif now == "queued":
        notes.append(Note(step.id, k, f"retrying now (attempt {k + 1} of {of})"))
    else:
        notes.append(Note(step.id, k, f"failed: {step.reason} (attempt {k} of {of}, none left)"))
    return notes


def _kill_requests(
    kills: dict[tuple[str, int], KillAttempt], explained: set[tuple[str, int]]
) -> list[Note]:
    """Kill requests no other note tells, first: they happen first."""
    asks: list[Note] = []
    for (step_id, attempt), kill in kills.items():
        if (step_id, attempt) in explained:
            continue
        if kill.reason == CANCEL_REASON:
            text = f"cancel requested: asking runner {kill.runner} to kill attempt {attempt}"
        else:
            text = f"asking runner {kill.runner} to kill attempt {attempt}: {kill.reason}"
        asks.append(Note(step_id, attempt, text))
    return asks


def _call_note(step: StepRecord) -> Note:
    """A call step's child started, or succeeded (docs/sub-workflows.md)."""
    child = own_name(step.child_run or "")
    if step.status == "succeeded":
        return Note(step.id, step.attempt, f"child run {child} succeeded")
    name = step.workflow.name if step.workflow is not None else ""
    return Note(step.id, step.attempt, f"started child run {child} of workflow {name}")


def _answered(decision: ApprovalDecision) -> str:
    """An approval gate's answer, as its log tells it (docs/approvals.md)."""
    if not decision.approved:
        return rejection(decision)
    said = f": {decision.comment}" if decision.comment else ""
    return f"approved by {decision.by}{said}"


def _cancelled(step: StepRecord) -> str:
    """A step cancelled with its run: by a cancel, or at the run's deadline (its reason)."""
    if step.reason and step.reason != CANCEL_REASON:
        return f"cancelled: {step.reason}"
    return "cancelled: the run was cancelled"


def _attempt_reason(step: StepRecord, attempt: int) -> str:
    for rec in reversed(step.attempts):
        if rec.attempt == attempt and rec.reason:
            return rec.reason
    return step.reason or "runner silent"
