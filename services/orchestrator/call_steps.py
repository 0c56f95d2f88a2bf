"""A step that calls a registered workflow (docs/sub-workflows.md), a part of the run's state
machine (state.py): each attempt starts a child run, holding no runner, and the step ends
as the child ends; a run that is a child tells its parent its end. Given the run's records
(run_steps.py) and the step's transitions (transitions.py). Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Protocol

from heddle.services.orchestrator import loops
from heddle.services.orchestrator.decisions import (
    CancelChild,
    Effect,
    Ignored,
    PersistStep,
    StartChild,
    TellParent,
)
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.shared.core.calls import (
    call_attempt,
    child_run_id,
    depth_reason,
    gathered_outputs,
)
from heddle.shared.core.namespaces import own_name
from heddle.shared.core.step_env import env_bytes
from heddle.shared.wire.contracts import AttemptRecord, ChildEnded, StepRecord
from heddle.shared.wire.timefmt import from_epoch


class StepTransitions(loops.StepTransitions, Protocol):
    """What a call step asks of a step's transitions (transitions.py, which makes them):
    what a loop asks, and an attempt's failure."""

    def attempt_failed(
        self, step: StepRecord, reason: str, now: float, *, immediate: bool
    ) -> list[Effect]: ...


class CallSteps:
    """The run's call steps, and its own end told to its parent."""

    def __init__(self, records: RunSteps, transitions: StepTransitions) -> None:
        self.records = records
        self.transitions = transitions

    def start(self, step: StepRecord, attempt: int, stamp: str) -> list[Effect]:
        """The attempt starts its child: running at once, on no runner (not in the run's
        window, never queued), unless the child would nest too deep, when the step fails
        for good (another try would be as deep)."""
        prev = step.status
        run = self.records.run
        step.status = "running"
        step.attempt = attempt
        step.runner = step.offered_to = step.retry_at = None
        step.queued_at = step.started_at = stamp
        step.finished_at = step.exit_code = None
        step.child_run = child_run_id(run.run_id, step.id, attempt)
        step.attempts.append(
            AttemptRecord(attempt=attempt, started_at=stamp, child_run=step.child_run)
        )
        depth, limit = run.call_depth + 1, self.records.policy.max_call_depth
        if depth > limit:
            reason = depth_reason(depth, limit)
            self.records.close_attempt(step, stamp, None, reason)
            return self.transitions.fail(step, reason, stamp, prev)
        return [PersistStep(step, prev), *self.again(step, first=True)]

    def again(self, step: StepRecord, first: bool = False) -> list[Effect]:
        """The child's start, for a call step running: sent again by a rebuilt run (not
        ``first``), its submit makes one child however often it is sent."""
        if step.status != "running" or step.workflow is None or step.child_run is None:
            return []
        depth = self.records.run.call_depth + 1
        call = step.workflow
        return [StartChild(step.id, step.attempt, step.child_run, call, depth, again=not first)]

    def on_child_ended(self, ended: ChildEnded, now: float) -> list[Effect]:
        """The step's child ended: it succeeds with the child's outputs, or its attempt
        fails (retried with a new child, if it has tries left)."""
        step = self.records.steps.get(ended.step_id)
        if (
            step is None
            or step.status != "running"
            or step.attempt != ended.attempt
            or step.child_run != ended.child_run
        ):
            why = f"end of child run {own_name(ended.child_run)} ignored"
            return [Ignored(ended.step_id, why)]
        stamp = from_epoch(now)
        if ended.status == "succeeded":
            self.records.close_attempt(step, stamp, None, None)
            step.attempts[-1].outputs = dict(ended.outputs)
            return self.transitions.succeed(step, stamp)
        reason = f"child run {own_name(ended.child_run)} {ended.status}"
        if ended.reason:
            reason = f"{reason}: {ended.reason}"
        self.records.close_attempt(step, stamp, None, reason)
        return self.transitions.attempt_failed(step, reason, now, immediate=False)

    def stop(self, step: StepRecord, stamp: str) -> list[Effect]:
        """A running call step of a run stopping: cancelled now, and its child with it."""
        why = self.records.stop_reason
        self.records.close_attempt(step, stamp, None, why)
        cancel: list[Effect] = [CancelChild(step.child_run)] if step.child_run else []
        return cancel + self.transitions.terminate(step, "cancelled", why, stamp)

    def tell_parent(self, stamp: str) -> list[Effect]:
        """A child run's end, for its parent: its status, its succeeded steps' outputs, and
        why it did not succeed."""
        records, run = self.records, self.records.run
        if run.parent_run is None or run.parent_step is None:
            return []
        status, why = run.status, None if run.status == "succeeded" else self._why()
        outputs = (
            gathered_outputs((s.id, s.outputs) for s in records.steps.values() if s.parent is None)
            if status == "succeeded"
            else {}
        )
        size, limit = env_bytes(outputs) + 1024, records.policy.max_ready_bytes
        if limit and size > limit:
            # More than one message carries: the call step fails, saying so.
            status, outputs = "failed", {}
            why = f"its outputs make about {size} bytes; a message carries up to {limit}"
        ended = ChildEnded(
            run_id=run.parent_run,
            step_id=run.parent_step,
            attempt=call_attempt(run.run_id),
            child_run=run.run_id,
            status=status,
            ended_at=stamp,
            outputs=outputs,
            reason=why,
        )
        return [TellParent(ended)]

    def _why(self) -> str | None:
        """Why the run did not succeed: its own reason, or its first step that failed."""
        run = self.records.run
        if run.reason is not None:
            return run.reason
        for step in sorted(self.records.steps.values(), key=lambda s: s.index):
            if step.status == "failed" and not step.allow_failure:
                return f"step {step.id} failed" + (f": {step.reason}" if step.reason else "")
        return None
