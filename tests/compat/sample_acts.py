"""What a receiver does with a golden sample, where that matters more than its fields: a
submit fed to the orchestrator's pure new-run path makes its run, a runner's event or a
command moves the run's state machine as it says, a gate record waits for approval, a log
message reads as its lines. Each takes the sample decoded and its raw bytes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from heddle.services.gateway.reads import log_lines
from heddle.services.gateway.reads.notifications import shown
from heddle.services.gateway.reads.runs import step_document
from heddle.services.gateway.reads.waiting import WaitFacts, semaphore_of, step_waiting
from heddle.services.orchestrator.decisions import Ignored, PersistRun
from heddle.services.orchestrator.lease_view import holder_of
from heddle.services.orchestrator.routing import decision_of
from heddle.services.orchestrator.state import RunState
from heddle.shared.core.tokens import TokenRecord, is_system_admin, role_in
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    Approval,
    CancelRun,
    ChildEnded,
    DeadlineDue,
    DecideApproval,
    Heartbeat,
    LogLine,
    Notification,
    Notify,
    RetryDue,
    RunRecord,
    StepFinished,
    StepRecord,
    StepSpec,
    StepStarted,
    SubmitRun,
    WorkflowCall,
)
from heddle.shared.wire.timefmt import epoch_of, from_epoch

from tests.support.run_states import POLICY, T0

Act = Callable[[Any, bytes], None]
# The run record's fields a submit gives it as they are.
SUBMITTED = (
    "workflow_name",
    "version",
    "trigger",
    "scheduled_for",
    "scheduled_tz",
    "params",
    "env",
    "retry_of",
    "timeout_seconds",
    "priority",
    "concurrency_key",
    "concurrency_limit",
    "on_limit",
    "notify",
    "parent_run",
    "parent_step",
    "call_depth",
)
# A step record's fields its spec gives it as they are.
SPECIFIED = ("command", "depends_on", "retries", "env", "when", "allow_failure", "for_each")
SPECIFIED += ("max_parallel", "runs_on", "semaphores", "approval", "workflow")


def run_of(run_id: str, *steps: StepSpec, ticket: str = "", **more: Any) -> RunState:
    """A run of ``steps`` made at T0, every attempt given ``ticket``."""
    cmd = SubmitRun(run_id=run_id, steps=list(steps), submitted_at=from_epoch(T0), **more)
    state, _ = RunState.new(cmd, POLICY, T0, rand=lambda: 0.5, tickets=lambda: ticket)
    return state


def makes_the_run(cmd: SubmitRun, raw: bytes) -> None:
    state, effects = RunState.new(cmd, POLICY, T0, rand=lambda: 0.5, tickets=lambda: "t")
    run = state.run
    assert (run.run_id, run.created_at, run.status) == (cmd.run_id, cmd.submitted_at, "running")
    for field in SUBMITTED:
        assert getattr(run, field) == getattr(cmd, field), field
    assert run.step_count == len(cmd.steps) + len(cmd.on_exit)
    assert cmd.timeout_seconds is not None
    deadline = epoch_of(cmd.submitted_at, T0) + cmd.timeout_seconds
    assert run.deadline_at == from_epoch(deadline)
    # Its concurrency key is asked for first: the run waits for it.
    assert run.waiting and run.concurrency_wait == cmd.concurrency_key
    specs = [*cmd.steps, *cmd.on_exit]
    assert list(state.steps) == [s.id for s in specs]
    for spec in specs:
        step = state.steps[spec.id]
        for field in SPECIFIED:
            assert getattr(step, field) == getattr(spec, field), (spec.id, field)
        assert step.timeout_seconds == (spec.timeout_seconds or POLICY.default_timeout)
        assert step.on_exit == (spec in cmd.on_exit)
    for step_id, done in cmd.carried.items():  # succeeded in the run it retries
        assert state.steps[step_id].status == "succeeded"
        assert state.steps[step_id].attempts == [done]
    assert any(isinstance(e, PersistRun) for e in effects)


def names_its_document(cmd: SubmitRun, raw: bytes) -> None:
    assert cmd.document is not None and cmd.document.seqs and not cmd.steps


def cancels(cmd: CancelRun, raw: bytes) -> None:
    state = run_of(cmd.run_id, StepSpec(id="a", command="true"))
    state.cancel(T0 + 5, cmd.reason)
    assert state.run.cancel_requested and state.run.reason == cmd.reason
    assert state.steps["a"].status == "cancelled"


def retries(cmd: RetryDue, raw: bytes) -> None:
    """The timer of a step whose attempts before ``cmd.attempt`` failed queues that one."""
    step_id = cmd.step_id
    state = run_of(cmd.run_id, StepSpec(id=step_id, command="false", retries=cmd.attempt))
    for attempt in range(1, cmd.attempt):
        if attempt > 1:
            state.on_retry_due(step_id, attempt, T0 + attempt)
        failed = StepFinished(
            run_id=cmd.run_id,
            step_id=step_id,
            attempt=attempt,
            runner="r1",
            outcome="failed",
            finished_at=from_epoch(T0 + attempt),
        )
        state.on_finished(failed, T0 + attempt)
    assert state.steps[step_id].status == "retrying"
    state.on_retry_due(step_id, cmd.attempt, T0 + 60)
    step = state.steps[step_id]
    assert (step.status, step.attempt) == ("queued", cmd.attempt)


def stops_at_its_deadline(cmd: DeadlineDue, raw: bytes) -> None:
    at = epoch_of(cmd.deadline_at, 0.0)
    state = run_of(cmd.run_id, StepSpec(id="a", command="sleep 9"), timeout_seconds=at - T0)
    assert state.run.deadline_at == cmd.deadline_at
    state.on_deadline(at)
    assert state.run.reason is not None and state.run.reason.startswith("deadline")
    assert state.steps["a"].status == "cancelled"


def answers_the_gate(cmd: DecideApproval, raw: bytes) -> None:
    gate = StepSpec(id=cmd.step_id, approval=Approval(message="Ship it?"))
    state = run_of(cmd.run_id, gate)
    assert state.steps[cmd.step_id].status == "waiting"
    state.on_gate_decided(cmd.step_id, cmd.attempt, decision_of(cmd), T0 + 9)
    step = state.steps[cmd.step_id]
    assert step.status == ("succeeded" if cmd.approved else "failed")
    assert step.decision is not None and step.decision.comment == cmd.comment


def ends_the_call(cmd: ChildEnded, raw: bytes) -> None:
    call = StepSpec(id=cmd.step_id, workflow=WorkflowCall(name="deploy"))
    state = run_of(cmd.run_id, call)
    assert state.steps[cmd.step_id].child_run == cmd.child_run
    state.on_child_ended(cmd, T0 + 9)
    step = state.steps[cmd.step_id]
    assert step.status == ("succeeded" if cmd.status == "succeeded" else "failed")
    assert cmd.reason is not None and step.reason is not None and cmd.reason in step.reason


def starts(ev: StepStarted, raw: bytes) -> None:
    state = run_of(ev.run_id, StepSpec(id=ev.step_id, command="make"), ticket=ev.ticket)
    effects = state.on_started(ev, T0 + 1)
    assert not any(isinstance(e, Ignored) for e in effects)
    step = state.steps[ev.step_id]
    assert (step.status, step.runner, step.attempts[-1].pid) == ("running", ev.runner, ev.pid)


def finishes(ev: StepFinished, raw: bytes) -> None:
    """Its attempt's outcome counts: the step ends as it says, its outputs kept."""
    state = run_of(ev.run_id, StepSpec(id=ev.step_id, command="make"), ticket=ev.ticket)
    effects = state.on_finished(ev, T0 + 2)
    assert not any(isinstance(e, Ignored) for e in effects)
    step = state.steps[ev.step_id]
    assert (step.status, step.exit_code, step.runner) == (ev.outcome, ev.exit_code, ev.runner)
    assert step.attempts[-1].outputs == ev.outputs and step.outputs == ev.outputs
    assert step.stdout_tail == ev.stdout_tail and step.stderr_tail == ev.stderr_tail


def is_heard(hb: Heartbeat, raw: bytes) -> None:
    state = run_of(hb.run_id, StepSpec(id=hb.step_id, command="make"), ticket=hb.ticket)
    state.on_heartbeat(hb.step_id, hb.attempt, hb.runner, None)
    assert state.steps[hb.step_id].runner == hb.runner


def waits_for_approval(step: StepRecord, raw: bytes) -> None:
    why = step_waiting(step, WaitFacts())
    assert step.approval is not None and why is not None
    assert (why.reason, why.message) == ("approval", step.approval.message)


def shows_its_outputs(step: StepRecord, raw: bytes) -> None:
    assert step.outputs and step_document(step, None).outputs == step.outputs


def is_an_instance(step: StepRecord, raw: bytes) -> None:
    match = names.INSTANCE_PATTERN.match(step.id)
    assert match is not None and match.groups() == (step.parent, str(step.item_index))


def has_its_parent(run: RunRecord, raw: bytes) -> None:
    assert run.parent_run and run.parent_step and run.call_depth > 0


def has_its_notify(run: RunRecord, raw: bytes) -> None:
    assert run.notify and run.notify[0].url.startswith("https://") and run.notify[0].secret


def is_delivered_as_shown(n: Notification, raw: bytes) -> None:
    targets = [Notify(url=n.url) for _ in range(n.index + 1)]
    run = RunRecord(run_id=n.run_id, status=n.run_status, created_at="", step_count=1)
    run.notify = targets
    doc = shown(run, {n.index: n})[n.index]
    assert (doc.state, doc.url, len(doc.attempts)) == (n.state, n.url, len(n.attempts))


def grants_its_namespaces(token: TokenRecord, raw: bytes) -> None:
    assert not is_system_admin(token)
    for namespace, role in token.namespaces.items():
        assert role_in(token, namespace) == role


def reads_as_lines(note: LogLine, raw: bytes) -> None:
    assert log_lines.decode(raw) == (note.stream, note.seq, note.texts())


def chunk_of(raw: bytes) -> tuple[str, int, list[str]]:
    """A chunk's sample (its headers and its body) as the gateway reads the message."""
    sample = json.loads(raw)
    return log_lines.decode(sample["body"].encode(), sample["headers"])


def reads_its_chunk(read: tuple[str, int, list[str]], raw: bytes) -> None:
    sample = json.loads(raw)
    headers = sample["headers"]
    stream, seq = headers[names.LOG_STREAM_HEADER], int(headers[names.LOG_SEQ_HEADER])
    assert read == (stream, seq, sample["body"].split("\n"))


def names_its_holder(lease: Any, raw: bytes) -> None:
    holder = holder_of(raw)
    assert (holder.name, holder.life) == (lease.name, lease.life)


def holds_its_slots(sem: Any, raw: bytes) -> None:
    read = semaphore_of(raw)
    assert read.size == sem.size
    assert read.holders == [f"{h.run_id}/{h.step_id}" for h in sem.holders]


def nothing(value: Any, raw: bytes) -> None:
    """Read, and kept whole when written back: all a receiver does with it."""
