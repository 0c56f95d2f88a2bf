"""Approval gates in the run's state machine (services/orchestrator/gates.py,
gate_answers.py; no I/O): a gate its dependencies let start waits, with no ready message,
no runner and no place in the run's window, its record opened; an answer ends it once
(approved: succeeded; rejected: failed, and what follows as a failure's); its timeout fails
it; a cancel cancels it; a rebuilt run keeps it waiting. Against a real stack:
tests/integration/test_approvals.py."""

from __future__ import annotations

import dataclasses

import msgspec
from heddle.services.orchestrator.decisions import (
    CloseGate,
    Enqueue,
    Ignored,
    OpenGate,
    PersistRun,
    PersistStep,
    ScheduleRetry,
    giving_back,
)
from heddle.services.orchestrator.notes import transition_notes
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import (
    Approval,
    ApprovalDecision,
    StepFinished,
    StepSpec,
    SubmitRun,
)
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import (
    POLICY,
    RUN,
    T0,
    cancel,
    finish_step,
    made,
    rebuilt,
    spec,
    statuses,
)

LATER = T0 + 10


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def gate_spec(sid: str = "ok", deps: tuple[str, ...] = ("build",), **approval: object) -> StepSpec:
    return StepSpec(
        id=sid, depends_on=list(deps), approval=Approval(message="ship it?", **approval)
    )


def deploy(timeout: float | None = None, **run: object) -> tuple[RunState, list]:
    """build -> ok (a gate) -> ship."""
    steps = [spec("build"), gate_spec(timeout_seconds=timeout), spec("ship", ("ok",))]
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=steps)
    return made(cmd, **run)  # type: ignore[arg-type]


def answer(approved: bool, by: str = "alice", comment: str = "") -> ApprovalDecision:
    return ApprovalDecision(approved=approved, by=by, decided_at=from_epoch(LATER), comment=comment)


def waiting() -> tuple[RunState, list]:
    state, _ = deploy()
    return state, finish_step(state, "build")


def test_a_gate_due_waits_with_its_record_and_no_ready_message() -> None:
    state, out = waiting()
    gate = state.steps["ok"]
    assert (gate.status, gate.attempt, gate.runner) == ("waiting", 1, None)
    assert of(Enqueue, out) == []  # no runner asked for
    assert "ok" not in state.records.flying  # no place in the run's window
    [opened] = of(OpenGate, out)
    assert (opened.gate.run_id, opened.gate.step_id, opened.gate.attempt) == (RUN, "ok", 1)
    assert opened.gate.message == "ship it?" and opened.gate.decision is None
    assert opened.gate.since == gate.started_at and opened.gate.deadline_at is None
    # The step's record goes before its gate's: a gate listed is a step stored waiting.
    kinds = [type(e) for e in out]
    assert kinds.index(OpenGate) > max(
        i for i, e in enumerate(out) if isinstance(e, PersistStep) and e.step.id == "ok"
    )
    assert of(ScheduleRetry, out) == []  # no timeout: it waits as long as its run


def test_approved_the_gate_succeeds_and_what_follows_is_queued() -> None:
    state, _ = waiting()
    decision = answer(True, comment="looks good")
    out = state.on_gate_decided("ok", 1, decision, LATER)
    assert statuses(state) == {"build": "succeeded", "ok": "succeeded", "ship": "queued"}
    assert state.steps["ok"].decision == decision
    assert state.steps["ok"].finished_at == from_epoch(LATER)
    assert [e.ready.step_id for e in of(Enqueue, out)] == ["ship"]
    # Its record is closed after its step's, however it ended.
    assert CloseGate("ok") in giving_back(out)


def test_rejected_the_gate_fails_with_who_and_why_and_the_run_fails() -> None:
    state, _ = waiting()
    out = state.on_gate_decided("ok", 1, answer(False, "bob", "not today"), LATER)
    assert statuses(state) == {"build": "succeeded", "ok": "failed", "ship": "skipped"}
    assert state.steps["ok"].reason == "rejected by bob: not today"
    assert state.steps["ok"].decision is not None and not state.steps["ok"].decision.approved
    assert state.run.status == "failed"
    assert CloseGate("ok") in giving_back(out)


def test_a_gate_is_answered_once() -> None:
    state, _ = waiting()
    state.on_gate_decided("ok", 1, answer(True), LATER)
    again = state.on_gate_decided("ok", 1, answer(False, "bob"), LATER + 1)
    assert of(Ignored, again) and len(again) == 1
    assert state.steps["ok"].status == "succeeded"
    assert state.steps["ok"].decision == answer(True)


def test_an_answer_for_another_attempt_or_a_command_step_changes_nothing() -> None:
    state, _ = waiting()
    assert of(Ignored, state.on_gate_decided("ok", 2, answer(True), LATER))
    assert of(Ignored, state.on_gate_decided("build", 1, answer(True), LATER))
    assert of(Ignored, state.on_gate_decided("nope", 1, answer(True), LATER))
    assert state.steps["ok"].status == "waiting"


def test_a_gate_with_a_timeout_has_its_timer_and_fails_past_it() -> None:
    state, _ = deploy(timeout=30)
    out = finish_step(state, "build")
    since = state.steps["ok"].started_at
    assert since is not None
    [timer] = of(ScheduleRetry, out)
    at = T0 + 2 + 30  # build finished at T0 + 2
    assert (timer.step_id, timer.attempt, timer.at) == ("ok", 1, at)
    [opened] = of(OpenGate, out)
    assert opened.gate.deadline_at == from_epoch(at)
    # A timer that comes early is set again; on time, the gate fails, answered by timeout.
    assert of(ScheduleRetry, state.on_retry_due("ok", 1, at - 5))
    assert state.steps["ok"].status == "waiting"
    state.on_retry_due("ok", 1, at)
    gate = state.steps["ok"]
    assert gate.status == "failed" and gate.reason == "approval timed out after 30 s"
    assert gate.decision is not None and gate.decision.by == "timeout"
    assert not gate.decision.approved
    assert state.run.status == "failed"


def test_a_cancel_cancels_a_waiting_gate_and_closes_its_record() -> None:
    state, _ = waiting()
    out = cancel(state)
    assert statuses(state) == {"build": "succeeded", "ok": "cancelled", "ship": "cancelled"}
    assert state.run.status == "cancelled"
    assert CloseGate("ok") in giving_back(out)
    # An answer that comes after changes nothing.
    assert of(Ignored, state.on_gate_decided("ok", 1, answer(True), LATER))


def test_a_rebuilt_run_keeps_its_gate_waiting_then_takes_its_answer() -> None:
    state, _ = deploy(timeout=60)
    finish_step(state, "build")
    again = rebuilt(state)
    out = again.resume(T0 + 5)
    assert again.steps["ok"].status == "waiting"
    assert of(Enqueue, out) == [] and of(OpenGate, out) == []
    # Its timeout's timer, scheduled again (the same schedule replaces the one pending).
    assert [(t.step_id, t.attempt, t.at) for t in of(ScheduleRetry, out)] == [("ok", 1, T0 + 62)]
    again.on_gate_decided("ok", 1, answer(True), LATER)
    assert statuses(again)["ship"] == "queued"


def test_a_gate_beside_a_command_does_not_take_the_window() -> None:
    policy = dataclasses.replace(POLICY, window=lambda: 1)
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[gate_spec(deps=()), spec("work")],
    )
    state, out = made(cmd, policy)
    assert statuses(state) == {"ok": "waiting", "work": "queued"}
    assert [e.ready.step_id for e in of(Enqueue, out)] == ["work"]
    assert [e.gate.step_id for e in of(OpenGate, out)] == ["ok"]
    # A new run's gate's record goes after the run's record, its commit point: a submit of a
    # run that exists must not touch that run's gates.
    kinds = [type(e) for e in out]
    assert kinds.index(OpenGate) > kinds.index(PersistRun)


def test_a_gate_whose_condition_is_false_is_skipped_without_a_record() -> None:
    steps = [spec("build"), msgspec.structs.replace(gate_spec(), when="false")]
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=steps)
    state, _ = made(cmd)
    out = finish_step(state, "build")
    assert state.steps["ok"].status == "skipped"
    assert of(OpenGate, out) == []


def test_the_gate_s_log_tells_its_wait_and_its_answer() -> None:
    state, out = waiting()
    texts = [n.text for n in transition_notes(out) if n.step_id == "ok"]
    assert texts == ["waiting for an answer: ship it?"]
    out = state.on_gate_decided("ok", 1, answer(True, comment="go"), LATER)
    assert [n.text for n in transition_notes(out) if n.step_id == "ok"] == ["approved by alice: go"]
    again, _ = waiting()
    out = again.on_gate_decided("ok", 1, answer(False, "bob"), LATER)
    assert [n.text for n in transition_notes(out) if n.step_id == "ok"] == ["rejected by bob"]


def test_a_runner_s_report_on_a_gate_counts_for_nothing() -> None:
    """A gate has no runner and no ticket: no runner's event may end it."""
    state, _ = waiting()
    ev = StepFinished(
        run_id=RUN,
        step_id="ok",
        attempt=1,
        runner="r9",
        ticket="",
        outcome="succeeded",
        finished_at=from_epoch(LATER),
        exit_code=0,
    )
    out = state.on_finished(ev, LATER)
    assert of(Ignored, out) and state.steps["ok"].status == "waiting"


def test_the_run_s_deadline_cancels_a_waiting_gate() -> None:
    steps = [spec("build"), gate_spec(), spec("ship", ("ok",))]
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=steps, timeout_seconds=60)
    state, _ = made(cmd)
    finish_step(state, "build")
    out = state.on_deadline(T0 + 61)
    assert statuses(state) == {"build": "succeeded", "ok": "cancelled", "ship": "cancelled"}
    assert state.run.status == "failed" and state.steps["ok"].reason == state.run.reason
    assert CloseGate("ok") in giving_back(out)
