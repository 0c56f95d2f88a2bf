"""Exit handlers in the run's state machine (``onExit``): started once every step of the
workflow has ended, whatever the outcome; told how the run went; a first cancel lets them
run, a second stops them; one that fails fails the run. No I/O."""

from __future__ import annotations

import pytest
from heddle.services.orchestrator.decisions import Enqueue, KillAttempt
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import POLICY, RUN, T0, finish_step, made, spec, started, statuses


def new(
    steps: list[StepSpec], on_exit: list[StepSpec], admitted: bool = True, timeout: float = 0
) -> RunState:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=steps,
        on_exit=on_exit,
        timeout_seconds=timeout or None,
    )
    state, _ = made(cmd, admitted=admitted)
    return state


def ready_env(effects: list, sid: str) -> dict[str, str]:
    [ready] = [e.ready for e in effects if isinstance(e, Enqueue) and e.ready.step_id == sid]
    return dict(ready.env)


def test_exit_handlers_wait_for_every_step_then_run_in_their_order() -> None:
    state = new([spec("a"), spec("b", ("a",))], [spec("notify"), spec("tidy", ("notify",))])
    assert statuses(state) == {
        "a": "queued",
        "b": "pending",
        "notify": "pending",
        "tidy": "pending",
    }
    finish_step(state, "a")
    assert state.steps["notify"].status == "pending"
    effects = finish_step(state, "b")
    assert ready_env(effects, "notify")["HEDDLE_RUN_STATUS"] == "succeeded"
    assert ready_env(effects, "notify")["HEDDLE_FAILED_STEPS"] == ""
    finish_step(state, "notify")
    assert state.steps["tidy"].status == "queued" and state.run.status == "running"
    finish_step(state, "tidy")
    assert state.run.status == "succeeded"


def test_after_a_failure_they_learn_which_steps_failed_and_the_run_fails() -> None:
    state = new([spec("a"), spec("b"), spec("c", ("a",))], [spec("report")])
    finish_step(state, "a", "failed")
    effects = finish_step(state, "b")
    env = ready_env(effects, "report")
    assert env["HEDDLE_RUN_STATUS"] == "failed" and env["HEDDLE_FAILED_STEPS"] == "a"
    assert state.steps["c"].status == "skipped"
    finish_step(state, "report")
    assert state.run.status == "failed"


@pytest.mark.parametrize(("allow", "run"), [(False, "failed"), (True, "succeeded")])
def test_an_exit_handler_that_fails_fails_the_run_unless_allowed(allow: bool, run: str) -> None:
    state = new([spec("a")], [spec("report", allow_failure=allow)])
    finish_step(state, "a")
    finish_step(state, "report", "failed")
    assert state.run.status == run


def test_a_first_cancel_lets_them_run_a_second_stops_them() -> None:
    state = new([spec("a"), spec("b", ("a",))], [spec("clean")])
    started("a")(state)
    effects = state.cancel(T0 + 5)
    assert any(isinstance(e, KillAttempt) and e.step_id == "a" for e in effects)
    assert statuses(state) == {"a": "running", "b": "cancelled", "clean": "pending"}
    effects = finish_step(state, "a", "failed")  # killed
    assert state.steps["a"].status == "cancelled"
    assert ready_env(effects, "clean")["HEDDLE_RUN_STATUS"] == "cancelled"
    started("clean")(state)
    effects = state.cancel(T0 + 6)
    assert [e.step_id for e in effects if isinstance(e, KillAttempt)] == ["clean"]
    assert state.cancel(T0 + 7) == []  # a third does nothing more
    finish_step(state, "clean", "failed")
    assert state.steps["clean"].status == "cancelled" and state.run.status == "cancelled"


def test_a_run_cancelled_while_waiting_its_turn_runs_no_exit_handler() -> None:
    state = new([spec("a")], [spec("clean")], admitted=False)
    state.cancel(T0 + 5)
    assert statuses(state) == {"a": "cancelled", "clean": "cancelled"}
    assert state.run.status == "cancelled"


def test_exit_handlers_run_at_once_when_every_step_is_skipped_at_the_start() -> None:
    state = new([spec("a", when="false")], [spec("clean")])
    assert statuses(state) == {"a": "skipped", "clean": "queued"}


def test_an_exit_handler_condition_reads_any_step_of_the_workflow() -> None:
    state = new(
        [spec("a"), spec("b")],
        [spec("page", when="steps.a.status == 'failed'"), spec("log", when="true")],
    )
    finish_step(state, "a")
    finish_step(state, "b")
    assert statuses(state) == {
        "a": "succeeded",
        "b": "succeeded",
        "page": "skipped",
        "log": "queued",
    }


def test_a_rebuilt_run_starts_the_exit_handlers_its_crash_left_pending() -> None:
    state = new([spec("a")], [spec("clean")])
    finish_step(state, "a")
    clean = state.steps["clean"]
    clean.status, clean.attempt, clean.ticket = "pending", 0, ""  # the crash fell before
    again = RunState(state.run, list(state.steps.values()), POLICY)
    effects = again.resume(T0 + 10)
    assert again.steps["clean"].status == "queued"
    assert ready_env(effects, "clean")["HEDDLE_RUN_STATUS"] == "succeeded"


def test_a_rebuilt_run_cancelled_twice_stays_cancelled_twice() -> None:
    state = new([spec("a")], [spec("clean")])
    started("a")(state)
    state.cancel(T0 + 5)
    finish_step(state, "a", "failed")
    started("clean")(state)
    state.cancel(T0 + 6)
    again = RunState(state.run, list(state.steps.values()), POLICY)
    effects = again.resume(T0 + 10)
    assert [e.step_id for e in effects if isinstance(e, KillAttempt)] == ["clean"]
    assert again.run.exit_cancelled and again.run.cancel_requested


def test_past_the_deadline_the_exit_handlers_run_and_the_run_fails() -> None:
    state = new([spec("a"), spec("b", ("a",))], [spec("report")], timeout=60)
    started("a")(state)
    effects = state.on_deadline(T0 + 61)
    assert [e.step_id for e in effects if isinstance(e, KillAttempt)] == ["a"]
    assert statuses(state) == {"a": "running", "b": "cancelled", "report": "pending"}
    effects = finish_step(state, "a", "failed")  # killed
    assert ready_env(effects, "report")["HEDDLE_RUN_STATUS"] == "failed"
    finish_step(state, "report")
    assert state.run.status == "failed"
    assert state.run.reason is not None and state.run.reason.startswith("deadline")


def test_a_cancel_past_the_deadline_stops_the_exit_handlers() -> None:
    state = new([spec("a")], [spec("report")], timeout=60)
    started("a")(state)
    state.on_deadline(T0 + 61)
    finish_step(state, "a", "failed")
    started("report")(state)
    effects = state.cancel(T0 + 62)
    assert [e.step_id for e in effects if isinstance(e, KillAttempt)] == ["report"]
    finish_step(state, "report", "failed")
    assert state.steps["report"].status == "cancelled" and state.run.status == "failed"
