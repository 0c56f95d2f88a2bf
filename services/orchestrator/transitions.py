"""A step's transitions within its run, part of the run's state machine (``RunState`` is a
``Transitions``): queued with its ready message, succeeded (readying what it was waited
for by), failed (retried, or for good, skipping what is downstream), terminal, and the
run's end once every step is. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable

from services.orchestrator.continuations import Continuing
from services.orchestrator.decisions import (
    Effect,
    Enqueue,
    PersistRun,
    PersistStep,
    ScheduleRetry,
)
from shared.backoff import backoff
from shared.contracts import TERMINAL_STEP, AttemptRecord, StepFinished, StepReady, StepRecord
from shared.dag import Readiness, downstream
from shared.step_env import env_bytes, step_variables
from shared.timefmt import from_epoch


def enqueue(step: StepRecord, ready: StepReady, handoff: str | None = None) -> Enqueue:
    return Enqueue(ready, handoff, opens=not step.depends_on)


class Transitions(Continuing):
    """A run's step transitions; mixed into ``RunState``, whose state it uses."""

    terminal: int
    succeeded: set[str]
    with_outputs: set[str]
    readiness: Readiness
    _rand: Callable[[], float]

    @property
    def done(self) -> bool:
        return self.run.status != "running"

    def _stale(self, step: StepRecord, attempt: int, runner: str) -> str | None:
        if step.status in TERMINAL_STEP:
            return f"step is already {step.status}"
        if attempt != step.attempt:
            return f"attempt {attempt} is not the current attempt {step.attempt}"
        if step.status in ("pending", "retrying"):
            return f"step is {step.status}"
        if step.runner and runner != step.runner:
            return f"attempt {attempt} belongs to runner {step.runner}, not {runner}"
        return None

    def _queue(
        self, step: StepRecord, attempt: int, stamp: str, handoff: str | None = None
    ) -> list[Effect]:
        prev = step.status
        step.status = "queued"
        step.attempt = attempt
        step.runner = None
        step.queued_at = stamp
        step.retry_at = None
        step.started_at = step.finished_at = step.exit_code = None
        step.requeues = 0
        step.ticket = self._tickets()
        # Prepared to follow its attempt as given before, if ever.
        spent = self._unprepare(step, stamp)
        ready, too_large = self._ready(step)
        if too_large:
            # No runner could be given it, and another try would be as large.
            step.attempts.append(AttemptRecord(attempt=attempt))
            self._close_attempt(step, stamp, None, too_large)
            return spent + self._fail(step, too_large, stamp, prev)
        # Stored with the queued record, so that whoever rebuilds the run knows a runner
        # may hold the attempt although no ready message of it is in the stream.
        step.offered_to = handoff
        if handoff is not None:
            return [
                *spent,
                PersistStep(step, prev),
                enqueue(step, ready, handoff),
                *self._prepare_next(step, handoff, stamp),
            ]
        # The prepared successor's record goes before the message that carries it.
        prepared, ready = self._carried(step, ready, stamp)
        return [*spent, *prepared, PersistStep(step, prev), enqueue(step, ready)]

    def _ready(self, step: StepRecord) -> tuple[StepReady, str | None]:
        """The step's ready message, and why it cannot be sent (too large), if it cannot."""
        run = self.run
        upstream = self._outputs_upstream(step.id)
        env = step_variables(
            params=run.params,
            scheduled_for=run.scheduled_for,
            scheduled_tz=run.scheduled_tz,
            run_env=run.env,
            step_env=step.env,
            outputs=[(s, self.steps[s].outputs) for s in upstream],
        )
        ready = StepReady(
            run_id=run.run_id,
            step_id=step.id,
            attempt=step.attempt,
            command=step.command,
            timeout_seconds=step.timeout_seconds,
            ready_at=step.queued_at or "",
            requeue=step.requeues,
            ticket=step.ticket,
            env=env,
        )
        limit = self.policy.max_ready_bytes
        if limit and env:
            size = env_bytes(env) + len(step.command.encode()) + 512
            if size > limit:
                return ready, (
                    f"its environment (parameters, env and upstream outputs) makes its ready "
                    f"message about {size} bytes; the NATS server accepts up to {limit}"
                )
        return ready, None

    def _outputs_upstream(self, step_id: str) -> list[str]:
        """The steps upstream of ``step_id`` (directly or not) that have outputs, in document
        order. Asked when the step is queued, when every one upstream has succeeded."""
        if not self.with_outputs:
            return []
        memo, parents, has = self._upstream_outputs, self.graph.parents, self.with_outputs
        todo = [step_id]
        while todo:
            node = todo[-1]
            missing = [p for p in parents[node] if p not in memo]
            if missing:
                todo.extend(missing)
                continue
            todo.pop()
            if node in memo:
                continue
            acc: frozenset[str] = frozenset()
            for p in parents[node]:
                carried = memo[p] | {p} if p in has else memo[p]
                acc = acc | carried if acc else carried
            memo[node] = acc
        return sorted(memo[step_id], key=self.graph.index.__getitem__)

    def _close_attempt(
        self, step: StepRecord, at: str, exit_code: int | None, reason: str | None
    ) -> None:
        step.finished_at = at
        if step.attempts and step.attempts[-1].attempt == step.attempt:
            rec = step.attempts[-1]
            rec.finished_at = at
            rec.exit_code = exit_code
            rec.reason = reason

    def _succeed(
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
        prev = step.status
        step.status = "succeeded"
        step.reason = None
        self.terminal += 1
        self.succeeded.add(step.id)
        if step.outputs:
            self.with_outputs.add(step.id)
        ready = self.readiness.succeed(step.id)
        effects: list[Effect] = [PersistStep(step, prev)]
        handoff = by if self.policy.handoff else None
        if outcome is not None and outcome.continued:
            taken = self._take_continuation(step, outcome, ready, stamp)
            if taken:
                effects.extend(taken)
                handoff = None  # one runner, one step
            else:
                effects.extend(self._not_continued(outcome, "it was not prepared"))
        if not self.run.cancel_requested:
            for child_id in ready:
                child = self.steps[child_id]
                if child.status == "pending":
                    # Past an attempt a void continuation spent, if one did.
                    effects.extend(self._queue(child, child.attempt + 1, stamp, handoff))
                    if child.status == "queued":
                        handoff = None  # one runner, one step
        return effects + self._maybe_finish(stamp)

    def _attempt_failed(
        self, step: StepRecord, reason: str, now: float, *, immediate: bool
    ) -> list[Effect]:
        stamp = from_epoch(now)
        spent = self._unprepare(step, stamp)
        if self.run.cancel_requested:
            return (
                spent
                + self._terminate(step, "cancelled", "cancelled", stamp)
                + self._maybe_finish(stamp)
            )
        if step.attempt <= step.retries:
            next_attempt = step.attempt + 1
            if immediate:
                return spent + self._queue(step, next_attempt, stamp)
            delay = backoff(step.attempt, self.policy.retry_base, self.policy.retry_cap, self._rand)
            prev = step.status
            step.status = "retrying"
            step.reason = reason
            step.retry_at = from_epoch(now + delay)
            return [
                *spent,
                PersistStep(step, prev),
                ScheduleRetry(step.id, next_attempt, now + delay, delay),
            ]
        return spent + self._fail(step, reason, stamp, step.status)

    def _fail(self, step: StepRecord, reason: str, stamp: str, prev: str) -> list[Effect]:
        """The step fails for good: every step downstream of it is skipped."""
        effects = self._terminate(step, "failed", reason, stamp, prev)
        for victim_id, _parent in downstream(self.graph, step.id):
            victim = self.steps[victim_id]
            if victim.status == "pending":
                effects.extend(
                    self._terminate(
                        victim, "skipped", f"skipped because step {step.id} failed", stamp
                    )
                )
        return effects + self._maybe_finish(stamp)

    def _terminate(
        self, step: StepRecord, status: str, reason: str, stamp: str, prev: str | None = None
    ) -> list[Effect]:
        prev = step.status if prev is None else prev
        step.status = status  # type: ignore[assignment]
        step.reason = reason
        step.retry_at = None
        if step.finished_at is None or prev in ("pending", "queued", "retrying"):
            step.finished_at = stamp
        self.terminal += 1
        return [PersistStep(step, prev)]

    def _maybe_finish(self, stamp: str) -> list[Effect]:
        if self.done or self.terminal < len(self.steps):
            return []
        if self.run.cancel_requested:
            self.run.status = "cancelled"
        elif len(self.succeeded) == len(self.steps):
            self.run.status = "succeeded"
        else:
            self.run.status = "failed"
        self.run.finished_at = stamp
        return [PersistRun(self.run)]
