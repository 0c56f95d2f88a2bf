"""Re-running a run from its failure (``POST /api/runs/{run}/retry``): pure, no I/O.

The retry is a new run of the same steps, parameters, env, slot and timeout (a deadline of
its own, counted from its creation). Steps that succeeded are carried over as succeeded,
their succeeded attempt (and its outputs) with them, and do not run; the failed, skipped
and cancelled ones run again from their first attempt. Its id is derived from the retried
run's, so asking twice gives the same retry.
"""

from __future__ import annotations

import hashlib

from heddle.shared.core.namespaces import qualified, split_qualified
from heddle.shared.wire.contracts import (
    TERMINAL_RUN,
    AttemptRecord,
    RunRecord,
    StepRecord,
    StepSpec,
    SubmitRun,
)

RETRYABLE = frozenset({"failed", "cancelled"})


def retry_run_id(run_id: str) -> str:
    """``<run>-retry``, shortened with a digest to stay within 64 characters, in the run's
    namespace."""
    namespace, own = split_qualified(run_id)
    rid = f"{own}-retry"
    if len(rid) > 64:
        digest = hashlib.sha256(own.encode()).hexdigest()[:8]
        rid = f"{own[:40]}-{digest}-retry"
    return qualified(namespace, rid)


def refusal(run: RunRecord) -> str | None:
    """Why ``run`` cannot be retried (a 409), or None."""
    if run.status in RETRYABLE:
        return None
    what = "still running" if run.status not in TERMINAL_RUN else run.status
    return f"run {run.run_id!r} is {what}: only a failed or cancelled run can be retried"


def spec_of(step: StepRecord) -> StepSpec:
    """The step as its run's document wrote it."""
    return StepSpec(
        id=step.id,
        command=step.command,
        depends_on=step.depends_on,
        retries=step.retries,
        timeout_seconds=step.timeout_seconds,
        env=step.env,
        when=step.when,
        allow_failure=step.allow_failure,
        for_each=step.for_each,
        max_parallel=step.max_parallel,
        runs_on=step.runs_on,
        workflow=step.workflow,
        approval=step.approval,  # a gate rejected or timed out waits again
    )


def retry_command(run: RunRecord, steps: list[StepRecord], submitted_at: str) -> SubmitRun:
    """The submit of ``run``'s retry (``steps``: its step records, in any order)."""
    # A forEach step's instances are made again from it (or carried with it, as its
    # gathered outputs): not steps of the document.
    ordered = sorted((s for s in steps if s.parent is None), key=lambda s: s.index)
    carried: dict[str, AttemptRecord] = {}
    for s in ordered:
        if s.status != "succeeded" or s.on_exit:  # a run's end is handled again
            continue
        if s.for_each is not None:
            carried[s.id] = AttemptRecord(attempt=s.attempt, outputs=s.outputs)
        else:
            carried[s.id] = s.attempts[-1] if s.attempts else AttemptRecord(attempt=s.attempt)
    return SubmitRun(
        run_id=run.retried_by or retry_run_id(run.run_id),
        steps=[spec_of(s) for s in ordered if not s.on_exit],
        on_exit=[spec_of(s) for s in ordered if s.on_exit],
        submitted_at=submitted_at,
        workflow_name=run.workflow_name,
        version=run.version,
        trigger="retry",
        scheduled_for=run.scheduled_for,
        scheduled_tz=run.scheduled_tz,
        params=run.params,
        env=run.env,
        retry_of=run.run_id,
        carried=carried,
        timeout_seconds=run.timeout_seconds,  # a deadline of its own, from its creation
        priority=run.priority,
        concurrency_key=run.concurrency_key,  # the same key: the same params and workflow
        concurrency_limit=run.concurrency_limit,
        on_limit=run.on_limit,
        notify=run.notify,
    )
