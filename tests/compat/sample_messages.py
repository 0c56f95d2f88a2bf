"""The golden samples of the messages (tests/compat/make_samples.py writes them): the
commands, the work handed to runners and the runners' events, each with every optional field
set to a value other than its default, so that a field renamed or retyped shows."""

from __future__ import annotations

from typing import Any

from heddle.shared.core.calls import child_run_id
from heddle.shared.wire.contracts import (
    Approval,
    AssignReply,
    AttemptRecord,
    CancelAttempt,
    CancelRun,
    ChildEnded,
    DeadlineDue,
    DecideApproval,
    DocumentRef,
    Notify,
    RetryDue,
    StepFinished,
    StepReady,
    StepSpec,
    StepStarted,
    SubmitRun,
    WorkflowCall,
)

RUN = "team-a=release-42"  # a run of namespace team-a, as stored
PARENT = "team-a=ship-7"
T = "2026-01-02T03:04:05.000Z"
LATER = "2026-01-02T03:05:06.500Z"
TICKET = "tk-4f1c2a9e"


def steps() -> list[StepSpec]:
    """A workflow's steps: a command with every field, a gate and a call."""
    return [
        StepSpec(
            id="build",
            command="make build",
            retries=2,
            timeout_seconds=600.5,
            env={"TARGET": "linux"},
            when="params.skip != 'yes'",
            allow_failure=True,
            for_each='["amd64", "arm64"]',
            max_parallel=2,
            runs_on=["linux", "amd64"],
            semaphores=["builders"],
        ),
        StepSpec(
            id="approve",
            depends_on=["build"],
            approval=Approval(message="Ship it?", timeout_seconds=3600.5),
        ),
        StepSpec(
            id="ship",
            depends_on=["approve"],
            workflow=WorkflowCall(name="deploy", version=3, params={"env": "prod"}),
        ),
    ]


def scheduled() -> dict[str, Any]:
    """What a run started by its workflow's schedule carries from its submit to its record."""
    return {
        "workflow_name": "team-a=release",
        "version": 4,
        "trigger": "cron",
        "scheduled_for": T,
        "scheduled_tz": "Europe/Paris",
        "params": {"skip": "no"},
        "env": {"REGION": "eu"},
    }


def submit() -> SubmitRun:
    return SubmitRun(
        run_id=RUN,
        steps=steps(),
        submitted_at=T,
        **scheduled(),
        on_exit=[StepSpec(id="cleanup", command="make clean")],
        retry_of="team-a=release-41",
        carried={"build": AttemptRecord(attempt=1, runner="runner-0", outputs={"v": "1"})},
        timeout_seconds=7200.5,
        priority=5,
        concurrency_key="release-prod",
        concurrency_limit=2,
        on_limit="cancelRunning",
        notify=[Notify(url="https://hooks.example.org/heddle", on=["succeeded"], secret=True)],
        parent_run=PARENT,
        parent_step="release",
        call_depth=1,
    )


def submit_document() -> SubmitRun:
    """A submit too large for one message: the run id, and the document it names."""
    ref = DocumentRef(
        subject="heddle.doc.team-a=release-42.x1", seqs=[7, 8], size=300000, sha256="ab" * 32
    )
    return SubmitRun(run_id=RUN, steps=[], submitted_at=T, document=ref)


def commands() -> dict[str, object]:
    return {
        "command-submit": submit(),
        "command-submit-document": submit_document(),
        "command-cancel": CancelRun(run_id=RUN, requested_at=T, reason="key held by a newer run"),
        "command-timer": RetryDue(run_id=RUN, step_id="build", attempt=2),
        "command-deadline": DeadlineDue(run_id=RUN, deadline_at=LATER),
        "command-approval": DecideApproval(
            run_id=RUN,
            step_id="approve",
            attempt=1,
            approved=True,
            by="alice",
            decided_at=LATER,
            comment="looks good",
        ),
        "command-child-ended": ChildEnded(
            run_id=PARENT,
            step_id="release",
            attempt=1,
            child_run=child_run_id(PARENT, "release", 1),
            status="failed",
            ended_at=LATER,
            outputs={"build_v": "1"},
            reason="step build failed",
        ),
    }


def step_ready() -> StepReady:
    follow = StepReady(
        run_id=RUN,
        step_id="test",
        attempt=1,
        command="make test",
        timeout_seconds=300.5,
        ready_at=T,
        ticket="tk-next",
        after="build",
        after_attempt=1,
        after_ticket=TICKET,
    )
    return StepReady(
        run_id=RUN,
        step_id="build",
        attempt=1,
        command="make build",
        timeout_seconds=600.5,
        ready_at=T,
        requeue=1,
        ticket=TICKET,
        env={"HEDDLE_PARAM_SKIP": "no"},
        check=True,
        held_by="runner-2",
        after="fetch",
        after_attempt=2,
        after_ticket="tk-fetch",
        then=follow,
        runs_on=("amd64", "linux"),
        priority=5,
    )


def work() -> dict[str, object]:
    return {
        "step-ready": step_ready(),
        "assign-reply": AssignReply(accepted=False, runner="runner-0", reason="busy", jobs=3),
        "cancel-attempt": CancelAttempt(
            run_id=RUN, step_id="build", attempt=1, reason="run cancelled", ticket=TICKET
        ),
    }


def events() -> dict[str, object]:
    attempt: dict[str, Any] = {
        "run_id": RUN,
        "step_id": "build",
        "attempt": 1,
        "runner": "runner-0",
        "ticket": TICKET,
    }
    started = StepStarted(**attempt, pid=4242, started_at=T)
    finished = StepFinished(
        **attempt,
        outcome="succeeded",
        finished_at=LATER,
        exit_code=0,
        reason="exit code 0",
        stdout_tail="built\n",
        stderr_tail="warning: old cache\n",
        started_at=T,
        pid=4242,
        outputs={"version": "1.2.3"},
        continued="test",
        continued_ticket="tk-next",
        jobs=12,
    )
    return {"event-started": started, "event-finished": finished}


def messages() -> dict[str, object]:
    """Every message kind's samples, by file name."""
    return {**commands(), **work(), **events()}
