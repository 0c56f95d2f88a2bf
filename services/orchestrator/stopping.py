"""Stopping a run: what a cancel and the run's deadline both do to its steps (each attempt
a runner may hold killed, each step not started cancelled), a cancel's own decision, and
the deadline's own timer and decision. A part of the run's state machine (state.py), given
the run's records and a step's transitions. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from heddle.services.orchestrator.decisions import Effect, KillAttempt, PersistRun, ScheduleDeadline
from heddle.services.orchestrator.run_steps import RunSteps
from heddle.services.orchestrator.transitions import StepTransitions
from heddle.shared.wire.contracts import StepRecord
from heddle.shared.wire.timefmt import epoch_of, from_epoch


class Stopping:
    """A run's steps stopped, for a cancel or its deadline."""

    def __init__(self, records: RunSteps, transitions: StepTransitions) -> None:
        self.records = records
        self.transitions = transitions

    def cancel(self, now: float, reason: str | None = None) -> list[Effect]:
        """A first cancel stops the workflow's steps, and its exit handlers run once they have
        all ended; a second (or a cancel past the run's deadline) stops the exit handlers too.
        A run still waiting its turn never began: its exit handlers are cancelled with the
        rest. A cancel with a ``reason`` (another run's concurrency key) is a first cancel
        only, and the run's reason says why."""
        records = self.records
        run = records.run
        if records.done:
            return []
        if not records.stopping:
            run.cancel_requested = True
            run.reason = reason or run.reason
            targets = list(records.steps.values()) if run.waiting else records.main_steps()
        elif reason is not None:
            return []
        elif records.exits and not run.exit_cancelled:
            run.exit_cancelled = True
            targets = records.exit_steps()
        else:
            return []
        stamp = from_epoch(now)
        return [PersistRun(run), *self.stop(stamp, targets), *self.transitions.maybe_finish(stamp)]

    def on_deadline(self, now: float) -> list[Effect]:
        """The run's deadline timer: past it, every step still going is stopped
        (``stop``) and the run fails with a reason that says so, at once or once its
        killed steps report. Nothing for a run finished or stopping already. A timer that
        came early (a clock ahead of this one) is set again locally for the deadline."""
        run = self.records.run
        if self.records.done or self.records.stopping or run.deadline_at is None:
            return []
        if not self.deadline_passed(now):
            at = epoch_of(run.deadline_at, now)
            return [ScheduleDeadline(at, at - now, durable=False)]
        run.reason = deadline_reason(run.timeout_seconds)
        stamp = from_epoch(now)
        return [
            PersistRun(run),
            *self.stop(stamp, self.records.main_steps()),  # the exit handlers run after
            *self.transitions.maybe_finish(stamp),
        ]

    def deadline_passed(self, now: float) -> bool:
        deadline = self.records.run.deadline_at
        return deadline is not None and now >= epoch_of(deadline, now) - DEADLINE_SLACK

    def deadline_timer(self, now: float) -> list[Effect]:
        """The timer of a deadline still to come, for a run going on; none otherwise."""
        run = self.records.run
        if self.records.done or self.records.stopping or run.deadline_at is None:
            return []
        at = epoch_of(run.deadline_at, now)
        return [ScheduleDeadline(at, max(at - now, 0.0))]

    def stop(self, stamp: str, steps: Iterable[StepRecord]) -> list[Effect]:
        """Stop ``steps``, for a run stopping (cancelled, or past its deadline: the reason is
        ``RunSteps.stop_reason``): each attempt a runner may hold is killed, and each step
        not started (pending, queued, retrying, a gate waiting) is cancelled; a running step
        is cancelled when its runner reports the kill. Ends nothing else: the caller decides
        what follows (``maybe_finish``). Safe to call again: a step that ended is left alone,
        a running one is asked to die again."""
        why = self.records.stop_reason
        effects: list[Effect] = []
        for step in steps:
            if step.status in ("pending", "queued", "retrying", "waiting"):
                # Handed to a runner, it may run there although it has not said so yet.
                holder = step.runner or step.offered_to
                if step.status == "queued" and holder:
                    effects.append(KillAttempt(holder, step.id, step.attempt, why, step.ticket))
                effects.extend(self.transitions.terminate(step, "cancelled", why, stamp))
            elif step.status == "running" and step.workflow is not None:
                effects.extend(self.transitions.calls.stop(step, stamp))  # and its child
            elif step.status == "running" and step.for_each is not None:
                # Its instances are stopped each as a step of their own.
                effects.extend(self.transitions.terminate(step, "cancelled", why, stamp))
            elif step.status == "running" and step.runner:
                effects.append(KillAttempt(step.runner, step.id, step.attempt, why, step.ticket))
        return effects


# A deadline timer that fires this much before the deadline (by this process's clock) acts
# all the same: the server's clock and this one may differ a little. Earlier, it is set again.
DEADLINE_SLACK = 1.0


def deadline_reason(timeout: float | None) -> str:
    """The reason of a run stopped at its deadline, and of the steps it stopped."""
    if timeout is None:
        return "deadline: the run passed its deadline"
    return f"deadline: the run passed its timeoutSeconds ({timeout:g} s)"
