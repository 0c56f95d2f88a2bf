"""The metrics of a stored batch of effects: each step's transitions, the runs that end, the
retries and requeues, and an attempt's dispatch latency and duration."""

from __future__ import annotations

from datetime import datetime

from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    Effect,
    Enqueue,
    PersistRun,
    PersistStep,
    Requeued,
    ScheduleRetry,
)
from heddle.shared.core.labels import DEFAULT_POOL, label_key
from heddle.shared.runtime.metrics import (
    CONTINUATIONS,
    DISPATCH_SECONDS,
    REQUEUES,
    RETRIES,
    RUNS,
    STEP_SECONDS,
    STEPS,
    child,
)
from heddle.shared.wire.contracts import TERMINAL_RUN, StepRecord

# An attempt's command ran: it left one of these states for one of those.
_RAN_FROM = frozenset({"queued", "running"})
_OUTCOME_OF = {
    "succeeded": "succeeded",
    "failed": "failed",
    "retrying": "failed",
    "cancelled": "cancelled",
}


def count(effects: list[Effect], created: bool = False) -> None:
    """The metrics of one stored batch: each transition as decided (a record changed twice
    in one batch counts twice), and an attempt's times when it leaves queued or running."""
    for eff in effects:
        match eff:
            case PersistStep(step=step, previous=previous, status=status):
                if previous == status:
                    continue
                child(STEPS, status).inc()
                if previous in _RAN_FROM and status in _OUTCOME_OF:
                    _attempt_times(step, _OUTCOME_OF[status], queued=previous == "queued")
                elif previous == "queued" and status == "running":
                    _attempt_times(step, None, queued=True)
            case PersistRun(status=status):
                # Written running when created and for a cancel request (no transition),
                # then once more, finished.
                if status in TERMINAL_RUN or created:
                    child(RUNS, status).inc()
            case ScheduleRetry():
                RETRIES.inc()
            case Requeued():
                REQUEUES.inc()
            case AwaitHandoff(continued=True):
                child(CONTINUATIONS, "started").inc()
            case Enqueue(ready=ready) if ready.then is not None:
                child(CONTINUATIONS, "sent").inc()
            case _:
                pass


def _attempt_times(step: StepRecord, outcome: str | None, *, queued: bool) -> None:
    """Dispatch latency (queued to started) when the attempt leaves queued, and its
    duration (started to finished) when it ends; skipped where a time is missing (a
    command that never started, a watchdog verdict)."""
    if not step.attempts:
        return
    rec = step.attempts[-1]
    if rec.attempt != step.attempt or rec.started_at is None:
        return
    try:
        started = datetime.fromisoformat(rec.started_at)  # RFC 3339 with Z: UTC, aware
        if queued and step.queued_at:
            waited = (started - datetime.fromisoformat(step.queued_at)).total_seconds()
            pool = label_key(step.runs_on) or DEFAULT_POOL
            child(DISPATCH_SECONDS, pool).observe(max(waited, 0.0))
        if outcome is not None and rec.finished_at:
            ran = (datetime.fromisoformat(rec.finished_at) - started).total_seconds()
            child(STEP_SECONDS, outcome).observe(max(ran, 0.0))
    except ValueError:  # a malformed stamp is no reason to fail a stored batch
        return
