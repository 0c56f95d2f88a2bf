"""Conditions in the run's state machine (services/orchestrator/transitions.py, ``decide``):
a step's ``when`` decided once every dependency has ended, a skip that stops at a condition
that holds, ``allowFailure``, and the same after a rebuild from the stored records. No I/O.
"""

from __future__ import annotations

import pytest
from heddle.services.orchestrator.decisions import Enqueue, PersistStep
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.wire.contracts import AttemptRecord, StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import POLICY, RUN, T0, finish_step, made, rebuilt, spec, statuses


def new(
    *steps: StepSpec, params: dict[str, str] | None = None, policy: Policy = POLICY
) -> RunState:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=list(steps),
        params=params or {},
        workflow_name="deploy",
        trigger="cron",
    )
    state, _ = made(cmd, policy)
    return state


@pytest.mark.parametrize(("env", "status"), [("prod", "queued"), ("dev", "skipped")])
def test_a_condition_on_a_parameter_is_decided_when_the_run_is_made(env: str, status: str) -> None:
    state = new(
        spec("deploy", when="params.env == 'prod'"),
        spec("notify", ("deploy",)),
        params={"env": env},
    )
    assert state.steps["deploy"].status == status
    if status == "skipped":
        assert state.steps["deploy"].reason == "skipped: when \"params.env == 'prod'\" is false"
        assert state.steps["notify"].status == "skipped"
        assert state.steps["notify"].reason == "skipped because step deploy was skipped"
        assert state.run.status == "succeeded"  # a condition that does not hold harms nothing


def test_a_clean_up_runs_after_a_failure_and_the_run_still_fails() -> None:
    state = new(
        spec("build"),
        spec("test", ("build",)),
        spec("clean", ("build",), when="steps.build.status == 'failed'"),
    )
    finish_step(state, "build", "failed")
    assert statuses(state) == {"build": "failed", "test": "skipped", "clean": "queued"}
    finish_step(state, "clean")
    assert state.run.status == "failed"


def test_a_clean_up_is_skipped_after_a_success() -> None:
    state = new(spec("build"), spec("clean", ("build",), when="steps.build.status == 'failed'"))
    finish_step(state, "build")
    assert state.steps["clean"].status == "skipped"
    assert state.run.status == "succeeded"


@pytest.mark.parametrize(("value", "status"), [("yes", "queued"), ("no", "skipped")])
def test_a_condition_reads_an_output_upstream(value: str, status: str) -> None:
    state = new(spec("check"), spec("go", ("check",), when="steps.check.outputs.ready == 'yes'"))
    finish_step(state, "check", outputs={"ready": value})
    assert state.steps["go"].status == status


def test_a_condition_that_fails_fails_its_step_alone() -> None:
    state = new(
        spec("a"),
        spec("b", ("a",), when="steps.a.outputs.missing == 'x'"),
        spec("c", ("b",)),
        spec("d", ("a",)),
    )
    finish_step(state, "a")
    b = state.steps["b"]
    assert b.status == "failed" and b.reason is not None and b.reason.startswith("when ")
    assert "missing" in b.reason
    assert statuses(state) == {"a": "succeeded", "b": "failed", "c": "skipped", "d": "queued"}
    finish_step(state, "d")
    assert state.run.status == "failed"


def test_a_conditional_step_waits_for_every_dependency_to_end() -> None:
    state = new(
        spec("a"), spec("b"), spec("join", ("a", "b"), when="steps.a.status != 'succeeded'")
    )
    finish_step(state, "a", "failed")
    assert state.steps["join"].status == "pending"  # b still runs
    finish_step(state, "b")
    assert state.steps["join"].status == "queued"


def test_a_skip_stops_at_a_condition_that_holds_and_goes_on_past_one_that_does_not() -> None:
    state = new(
        spec("a", when="false"),
        spec("b", ("a",)),
        spec("c", ("a",), when="steps.a.status == 'skipped'"),
        spec("d", ("a",), when="steps.a.status == 'succeeded'"),
        spec("e", ("d",)),
    )
    assert statuses(state) == {
        "a": "skipped",
        "b": "skipped",
        "c": "queued",
        "d": "skipped",
        "e": "skipped",
    }


def test_a_long_chain_of_conditions_that_do_not_hold_ends_without_recursion() -> None:
    chain = [spec("s0", when="false")]
    chain += [spec(f"s{i}", (f"s{i - 1}",), when="false") for i in range(1, 3000)]
    state = new(*chain)
    assert set(statuses(state).values()) == {"skipped"} and state.run.status == "succeeded"


@pytest.mark.parametrize(("allow", "run"), [(True, "succeeded"), (False, "failed")])
def test_an_allowed_failure_does_not_fail_the_run(allow: bool, run: str) -> None:
    state = new(
        spec("lint", allow_failure=allow),
        spec("report", ("lint",), when="steps.lint.status == 'failed'"),
        spec("after", ("lint",)),
    )
    finish_step(state, "lint", "failed")
    assert state.steps["after"].status == "skipped"  # its dependents still see failed
    finish_step(state, "report")
    assert state.run.status == run


def test_the_run_and_workflow_are_in_scope() -> None:
    state = new(
        spec("a", when=f"run.id == '{RUN}' && run.trigger == 'cron' && workflow.name == 'deploy'")
    )
    assert state.steps["a"].status == "queued"


def test_a_conditional_successor_is_not_carried_ahead_of_its_decision() -> None:
    policy = Policy(
        retry_base=1.0, retry_cap=300.0, default_timeout=900.0, handoff=True, continuations=True
    )
    plain = new(spec("a"), spec("b", ("a",)), policy=policy)
    cond = new(spec("a"), spec("b", ("a",), when="true"), policy=policy)
    assert plain.steps["b"].ticket  # prepared to follow a on its runner
    assert not cond.steps["b"].ticket


def test_a_rebuilt_run_decides_a_condition_whose_dependencies_ended_before_the_crash() -> None:
    state = new(spec("a"), spec("b", ("a",), when="steps.a.status == 'failed'"), spec("c", ("a",)))
    # Stored: a failed; b and c still pending (the crash fell before their records).
    a = state.steps["a"]
    a.status, a.attempts = "failed", [AttemptRecord(attempt=1)]
    again = rebuilt(state)
    again.resume(T0 + 10)
    assert statuses(again) == {"a": "failed", "b": "queued", "c": "skipped"}


def test_a_rebuilt_run_keeps_a_condition_waiting_for_a_dependency_still_running() -> None:
    state = new(spec("a"), spec("x"), spec("b", ("a", "x"), when="true"))
    finish_step(state, "a", "failed")
    again = rebuilt(state)
    again.resume(T0 + 10)
    assert again.steps["b"].status == "pending"
    enqueued = [e for e in again.resume(T0 + 11) if isinstance(e, Enqueue)]
    assert {e.ready.step_id for e in enqueued} == {"x"}


def test_a_new_run_stores_each_step_as_new_once_and_a_prepared_one_too() -> None:
    policy = Policy(
        retry_base=1.0, retry_cap=300.0, default_timeout=900.0, handoff=True, continuations=True
    )
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[spec("a"), spec("b", ("a",)), spec("c", ("b",)), spec("d", when="false")],
    )
    _, effects = RunState.new(cmd, policy, T0)
    persisted = [(e.step.id, e.previous) for e in effects if isinstance(e, PersistStep)]
    # b is prepared to follow a (its record goes before a's message), and is new besides;
    # d, decided at once, is stored by its decision alone.
    assert persisted == [
        ("b", "pending"),
        ("a", "pending"),
        ("b", "new"),
        ("c", "new"),
        ("d", "pending"),
    ]
