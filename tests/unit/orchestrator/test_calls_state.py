"""A call step in its run's state machine (services/orchestrator/call_steps.py, no I/O): it
starts its child on no runner, ends as the child ends (its outputs passed on, a retry per
attempt with a new child), is cancelled with its child, stays within the depth bound, and a
child run tells its parent its end. The same against a real stack:
tests/integration/test_sub_workflows.py."""

from __future__ import annotations

from heddle.services.orchestrator.decisions import (
    CancelChild,
    Enqueue,
    PersistRun,
    PersistStep,
    ScheduleRetry,
    StartChild,
    TellParent,
)
from heddle.services.orchestrator.notes import transition_notes
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.core.calls import child_run_id
from heddle.shared.wire.contracts import ChildEnded, StepSpec, SubmitRun, WorkflowCall
from heddle.shared.wire.timefmt import from_epoch

from tests.support import run_states as rs

CALL = WorkflowCall(name="child", params={"who": "ann"})


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def calling(
    retries: int = 0, depth: int = 0, policy: Policy = rs.POLICY, timeout: float | None = None
) -> tuple[RunState, list]:
    """call (a call of ``child``) -> after; ``timeout``: the run's timeoutSeconds."""
    cmd = SubmitRun(
        run_id=rs.RUN,
        submitted_at=from_epoch(rs.T0),
        steps=[
            StepSpec(id="call", workflow=CALL, retries=retries),
            rs.spec("after", ("call",)),
        ],
        call_depth=depth,
        timeout_seconds=timeout,
    )
    return rs.made(cmd, policy)


def ended(state: RunState, status: str = "succeeded", attempt: int = 1, **fields: object) -> list:
    child = state.steps["call"].child_run or ""
    cmd = ChildEnded(
        run_id=rs.RUN,
        step_id="call",
        attempt=attempt,
        child_run=child,
        status=status,  # type: ignore[arg-type]
        ended_at=from_epoch(rs.T0 + 2),
        **fields,  # type: ignore[arg-type]
    )
    return state.on_child_ended(cmd, rs.T0 + 2)


def test_a_call_step_starts_its_child_running_on_no_runner() -> None:
    state, effects = calling()
    step = state.steps["call"]
    assert (step.status, step.runner, step.attempt) == ("running", None, 1)
    assert step.child_run == child_run_id(rs.RUN, "call", 1)
    assert step.attempts[-1].child_run == step.child_run
    assert of(StartChild, effects) == [StartChild("call", 1, step.child_run, CALL, 1)]
    assert of(Enqueue, effects) == []  # no ready message: no runner runs it
    assert "call" not in state.records.flying  # nor does it take a place in the window
    assert [n.text for n in transition_notes(effects) if n.step_id == "call"] == [
        f"started child run {step.child_run} of workflow child"
    ]
    # The watchdog's verdict on it means nothing: no runner holds it.
    assert all(type(e).__name__ == "Ignored" for e in rs.silent("call")(state))


def test_a_childs_success_passes_its_outputs_to_the_steps_after() -> None:
    state, _ = calling()
    out = ended(state, outputs={"make_word": "hi-ann"})
    assert rs.statuses(state) == {"call": "succeeded", "after": "queued"}
    assert state.steps["call"].outputs == {"make_word": "hi-ann"}
    [enqueue] = of(Enqueue, out)
    assert enqueue.ready.env["HEDDLE_OUT_CALL_MAKE_WORD"] == "hi-ann"


def test_a_childs_failure_fails_the_step_or_retries_it_with_a_new_child() -> None:
    state, _ = calling()
    ended(state, "failed", reason="step no failed")
    first = child_run_id(rs.RUN, "call", 1)
    assert rs.statuses(state) == {"call": "failed", "after": "skipped"}
    assert state.steps["call"].reason == f"child run {first} failed: step no failed"
    assert state.run.status == "failed"
    state, _ = calling(retries=1)
    out = ended(state, "cancelled")
    assert state.steps["call"].status == "retrying" and of(ScheduleRetry, out)
    again = rs.retry_due("call", 2)(state)
    second = child_run_id(rs.RUN, "call", 2)
    assert of(StartChild, again) == [StartChild("call", 2, second, CALL, 1)]
    # The first child's end, told again late, is not the current attempt's.
    stale = ChildEnded(
        run_id=rs.RUN,
        step_id="call",
        attempt=1,
        child_run=first,
        status="succeeded",
        ended_at=from_epoch(rs.T0 + 4),
    )
    assert [type(e).__name__ for e in state.on_child_ended(stale, rs.T0 + 4)] == ["Ignored"]
    assert rs.statuses(state)["call"] == "running"


def test_a_cancel_cancels_the_call_step_and_its_child() -> None:
    state, _ = calling()
    child = state.steps["call"].child_run
    out = rs.cancel(state)
    assert of(CancelChild, out) == [CancelChild(child or "")]
    assert rs.statuses(state) == {"call": "cancelled", "after": "cancelled"}
    assert state.run.status == "cancelled"
    assert type(ended(state, "cancelled")[0]).__name__ == "Ignored"  # too late


def test_the_runs_deadline_cancels_the_call_step_and_its_child() -> None:
    state, _ = calling(timeout=60)
    child = state.steps["call"].child_run or ""
    out = state.on_deadline(rs.T0 + 65)
    assert of(CancelChild, out) == [CancelChild(child)]
    assert state.steps["call"].status == "cancelled"
    assert state.run.status == "failed" and (state.run.reason or "").startswith("deadline")


def test_a_call_deeper_than_the_bound_fails_without_a_child() -> None:
    state, effects = calling(depth=2, policy=Policy(max_call_depth=2))
    assert of(StartChild, effects) == []
    step = state.steps["call"]
    assert step.status == "failed"
    assert step.reason is not None and "HEDDLE_MAX_CALL_DEPTH (2)" in step.reason


def test_a_rebuilt_run_sends_its_running_childs_start_again() -> None:
    state, _ = calling()
    again = rs.rebuilt(state).resume(rs.T0 + 9)
    child = state.steps["call"].child_run or ""
    assert of(StartChild, again) == [StartChild("call", 1, child, CALL, 1, again=True)]


def test_a_child_run_tells_its_parent_its_end_before_storing_it() -> None:
    parent = "parent-1"
    child = child_run_id(parent, "call", 3)
    cmd = SubmitRun(
        run_id=child,
        submitted_at=from_epoch(rs.T0),
        steps=[rs.spec("make"), rs.spec("other")],
        parent_run=parent,
        parent_step="call",
        call_depth=1,
    )
    state, _ = rs.made(cmd)
    assert (state.run.parent_run, state.run.call_depth) == (parent, 1)
    rs.finish_step(state, "make", outputs={"word": "w"})
    out = rs.finish_step(state, "other")
    [tell] = of(TellParent, out)
    assert out.index(tell) < max(i for i, e in enumerate(out) if isinstance(e, PersistRun))
    assert tell.ended == ChildEnded(
        run_id=parent,
        step_id="call",
        attempt=3,
        child_run=child,
        status="succeeded",
        ended_at=tell.ended.ended_at,
        outputs={"make_word": "w"},
    )
    big = Policy(max_ready_bytes=2048)
    state, _ = rs.made(cmd, big)
    rs.finish_step(state, "make", outputs={"word": "w" * 4096})
    [tell] = of(TellParent, rs.finish_step(state, "other"))
    assert state.run.status == "succeeded"
    assert (tell.ended.status, tell.ended.outputs) == ("failed", {})
    assert "a message carries up to 2048" in (tell.ended.reason or "")
    state, _ = rs.made(cmd)
    rs.finish_step(state, "make", outcome="failed")
    [tell] = of(TellParent, rs.finish_step(state, "other"))
    assert (tell.ended.status, tell.ended.outputs) == ("failed", {})
    assert (tell.ended.reason or "").startswith("step make failed")


def test_a_run_without_a_parent_tells_no_one() -> None:
    state, _ = rs.made(
        SubmitRun(run_id=rs.RUN, submitted_at=from_epoch(rs.T0), steps=[rs.spec("a")])
    )
    out = rs.finish_step(state, "a")
    assert of(TellParent, out) == [] and of(PersistStep, out)
