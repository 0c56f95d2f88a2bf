"""The golden samples of the records (tests/compat/make_samples.py writes them): a run's and
its steps' records, the workflow registry, cron state and run history, each with every
optional field set to a value other than its default (a kind's variants share the fields
out: a gate step's ``approval``, a call step's ``workflow``)."""

from __future__ import annotations

from heddle.shared.wire.contracts import (
    Approval,
    ApprovalDecision,
    AttemptRecord,
    Concurrency,
    CronCursor,
    CronSlot,
    ParamSpec,
    Pause,
    RunRecord,
    RunSummary,
    StepRecord,
    StepSpec,
    Webhook,
    WorkflowCall,
    WorkflowLatest,
    WorkflowSpec,
    WorkflowVersion,
)

from tests.compat.sample_messages import (
    LATER,
    PARENT,
    RUN,
    TICKET,
    T,
    scheduled,
    steps,
    submit,
)

DECISION = ApprovalDecision(approved=True, by="alice", decided_at=LATER, comment="looks good")


def attempt() -> AttemptRecord:
    return AttemptRecord(
        attempt=1,
        runner="runner-0",
        pid=4242,
        started_at=T,
        finished_at=LATER,
        exit_code=0,
        reason="exit code 0",
        outputs={"version": "1.2.3"},
        child_run="team-a=deploy-9",
    )


def plain_step() -> StepRecord:
    return StepRecord(
        id="build",
        command="make build",
        index=1,
        depends_on=["fetch"],
        retries=2,
        timeout_seconds=600.5,
        status="succeeded",
        attempt=1,
        runner="runner-0",
        exit_code=0,
        queued_at=T,
        started_at=T,
        finished_at=LATER,
        last_heartbeat_at=T,
        retry_at=LATER,
        reason="exit code 0",
        stdout_tail="built\n",
        stderr_tail="warning: old cache\n",
        attempts=[attempt()],
        requeues=1,
        ticket=TICKET,
        env={"TARGET": "linux"},
        when="params.skip != 'yes'",
        allow_failure=True,
        on_exit=True,
        offered_to="runner-1",
        runs_on=["linux"],
        semaphores=["builders"],
        semaphore_wait="builders",
    )


def variant_steps() -> dict[str, StepRecord]:
    """The steps that are more than a command: a gate waiting and one answered, a call, a
    forEach step and one of its instances."""
    gate = Approval(message="Ship it?", timeout_seconds=3600.5)
    return {
        "step-record-gate": StepRecord(
            id="approve", status="waiting", attempt=1, started_at=T, approval=gate
        ),
        "step-record-gate-answered": StepRecord(
            id="approve", status="succeeded", attempt=1, approval=gate, decision=DECISION
        ),
        "step-record-call": StepRecord(
            id="ship",
            status="running",
            attempt=1,
            workflow=WorkflowCall(name="deploy", version=3, params={"env": "prod"}),
            child_run="team-a=deploy-9",
            attempts=[AttemptRecord(attempt=1, child_run="team-a=deploy-9")],
        ),
        "step-record-loop": StepRecord(
            id="build",
            command="make build",
            status="succeeded",
            for_each='["amd64", "arm64"]',
            max_parallel=2,
            instances=2,
            loop_outputs={"version": '["1.2.3", "1.2.4"]'},
        ),
        "step-record-instance": StepRecord(
            id="build[1]",
            command="make build",
            status="queued",
            attempt=1,
            parent="build",
            item="arm64",
            item_index=1,
        ),
    }


def run_records() -> dict[str, RunRecord]:
    base = {"run_id": RUN, "status": "running", "created_at": T, "step_count": 4}
    plain = RunRecord(
        run_id=RUN,
        status="failed",
        created_at=T,
        step_count=4,
        finished_at=LATER,
        cancel_requested=True,
        exit_cancelled=True,
        **scheduled(),
        retry_of="team-a=release-41",
        retried_by="team-a=release-43",
        waiting=True,
        timeout_seconds=7200.5,
        deadline_at=LATER,
        reason="deadline: 7200.5 s passed",
        priority=5,
        concurrency_wait="release-prod",
        concurrency_holder="team-a=release-40",
        runs_quota=True,
        quota_wait=True,
        concurrency_key="release-prod",
        concurrency_limit=2,
        on_limit="refuse",
    )
    return {
        "run-record": plain,
        "run-record-child": RunRecord(
            **base, parent_run=PARENT, parent_step="release", call_depth=1
        ),
        "run-record-notify": RunRecord(**base, notify=submit().notify),
    }


def registry() -> dict[str, object]:
    """The workflow registry, cron state and run history."""
    spec = WorkflowSpec(
        steps=steps(),
        name="release",
        schedule="0 3 * * *",
        timezone="Europe/Paris",
        catchup=False,
        description="Builds and ships a release",
        on_exit=[StepSpec(id="cleanup", command="make clean")],
        timeout_seconds=7200.5,
        priority=5,
        concurrency=Concurrency(key="params.env", limit=2, on_limit="refuse"),
        notify=submit().notify,
        webhooks=[Webhook(name="push", params={"ref": "body.ref"})],
        params=[ParamSpec(name="skip", default="no", description="Skip the build")],
        env={"REGION": "eu"},
    )
    return {
        "workflow-version": WorkflowVersion(
            name="team-a=release", version=4, registered_at=T, digest="cd" * 32, spec=spec
        ),
        "workflow-latest": WorkflowLatest(
            name="team-a=release",
            version=4,
            registered_at=T,
            digest="cd" * 32,
            step_count=3,
            schedule="0 3 * * *",
            timezone="Europe/Paris",
            catchup=False,
            description="Builds and ships a release",
            schedule_since=T,
            paused=True,
            paused_at=LATER,
            pauses=[Pause(start=T, end=LATER)],
        ),
        "cron-cursor": CronCursor(name="team-a=release", through=T, updated_at=LATER),
        "cron-slot": CronSlot(
            name="team-a=release", slot=T, run_id=RUN, version=4, claimed_at=LATER
        ),
        "run-summary": RunSummary(
            run_id=RUN,
            workflow_name="team-a=release",
            status="succeeded",
            created_at=T,
            step_count=4,
            counts={"succeeded": 4},
            version=4,
            trigger="cron",
            scheduled_for=T,
            finished_at=LATER,
        ),
    }


def records() -> dict[str, object]:
    """Every record kind's samples, by file name."""
    return {
        "attempt-record": attempt(),
        "step-record": plain_step(),
        **variant_steps(),
        **run_records(),
        **registry(),
    }
