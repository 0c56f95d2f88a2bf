"""A new run's records, made from its submit command: the run, its steps in their order,
and, for a retried run, the steps that succeeded there carried over.

Its own module: what a run is made of when it is submitted is decided once, apart from the
transitions that follow (state.py queues its first steps from these records). Pure: no I/O,
no clock.
"""

from __future__ import annotations

from heddle.services.orchestrator.run_steps import Policy
from heddle.shared.wire.contracts import AttemptRecord, RunRecord, StepRecord, SubmitRun
from heddle.shared.wire.timefmt import epoch_of, from_epoch


def new_records(
    cmd: SubmitRun, policy: Policy, admitted: bool, now: float, runs_quota: bool = False
) -> tuple[RunRecord, list[StepRecord]]:
    """The run's record and its steps', every step pending; not ``admitted`` (the runs under
    way at their bound), or with its namespace's ``runs_quota`` or a concurrency key
    (waiting for them), the run is stored waiting. A run with a timeout has its deadline,
    counted from its creation (``now`` if its stamp cannot be read)."""
    run = RunRecord(
        run_id=cmd.run_id,
        status="running",
        created_at=cmd.submitted_at,
        step_count=len(cmd.steps) + len(cmd.on_exit),
        workflow_name=cmd.workflow_name,
        version=cmd.version,
        trigger=cmd.trigger,
        scheduled_for=cmd.scheduled_for,
        scheduled_tz=cmd.scheduled_tz,
        params=dict(cmd.params),
        env=dict(cmd.env),
        waiting=not admitted or runs_quota or cmd.concurrency_key is not None,
        timeout_seconds=cmd.timeout_seconds,
        priority=cmd.priority,
        concurrency_key=cmd.concurrency_key,
        concurrency_limit=cmd.concurrency_limit,
        on_limit=cmd.on_limit,
        notify=list(cmd.notify),
        parent_run=cmd.parent_run,
        parent_step=cmd.parent_step,
        call_depth=cmd.call_depth,
        concurrency_wait=cmd.concurrency_key,
        runs_quota=runs_quota,
        quota_wait=runs_quota,
    )
    if cmd.timeout_seconds is not None:
        run.deadline_at = from_epoch(epoch_of(cmd.submitted_at, now) + cmd.timeout_seconds)
    steps = [
        StepRecord(
            id=s.id,
            command=s.command,
            index=i,
            depends_on=list(s.depends_on),
            retries=s.retries,
            timeout_seconds=s.timeout_seconds or policy.default_timeout,
            env=dict(s.env),
            when=s.when,
            allow_failure=s.allow_failure,
            on_exit=i >= len(cmd.steps),
            for_each=s.for_each,
            max_parallel=s.max_parallel,
            runs_on=list(s.runs_on),
            semaphores=list(s.semaphores),
            workflow=s.workflow,
            approval=s.approval,
        )
        for i, s in enumerate([*cmd.steps, *cmd.on_exit])
    ]
    if cmd.retry_of is not None:
        run.retry_of = cmd.retry_of
        for step in steps:
            done = cmd.carried.get(step.id)
            if done is not None:
                _carry_over(step, done, cmd.retry_of)
    return run, steps


def _carry_over(step: StepRecord, done: AttemptRecord, run_id: str) -> None:
    """A step of a retried run that succeeded there: succeeded here too, with the attempt
    that succeeded (and its outputs), and not run again."""
    step.status = "succeeded"
    step.attempt = done.attempt
    step.attempts = [done]
    step.runner = done.runner
    step.started_at = done.started_at
    step.finished_at = done.finished_at
    step.exit_code = done.exit_code
    step.reason = f"succeeded in run {run_id}; not run again"
    step.child_run = done.child_run  # a call step's child, reused
    if step.for_each is not None:  # its instances' outputs, as they were gathered there
        step.instances = 0
        step.loop_outputs = dict(done.outputs)
