"""A run's deadline in its state machine (services/orchestrator/state.py, no I/O): past its
workflow's timeoutSeconds every step still going is stopped (killed as a cancel kills it,
or cancelled) and the run fails with a reason that says so; a deadline that comes too late
does nothing, and a rebuilt run acts on one that passed meanwhile. The same against a real
stack: tests/integration/test_deadline.py."""

from __future__ import annotations

from heddle.services.orchestrator.decisions import (
    KillAttempt,
    PersistRun,
    ScheduleDeadline,
)
from heddle.services.orchestrator.notes import transition_notes
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import (
    T0,
    accepted,
    cancel,
    finished,
    make,
    rebuilt,
    started,
    statuses,
)

TIMEOUT = 60.0
PAST = T0 + TIMEOUT + 5  # a moment after the deadline


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def under_way() -> RunState:
    """a -> b, and c beside them: a running on r1, c queued and taken by r2 (not started
    yet), b pending behind a."""
    state, _ = make([("a", [], 0), ("b", ["a"], 0), ("c", [], 0)], timeout=TIMEOUT)
    started()(state)
    accepted("c", runner="r2")(state)
    return state


def test_a_new_run_stores_its_deadline_and_schedules_it_once_stored() -> None:
    state, effects = make([("a", [], 0)], timeout=TIMEOUT)
    assert state.run.timeout_seconds == TIMEOUT
    assert state.run.deadline_at == from_epoch(T0 + TIMEOUT)
    # After the run record, its commit point: the timer of a run that was never stored
    # would fire for nothing, or for another run of the same id.
    assert isinstance(effects[-2], PersistRun)
    assert effects[-1] == ScheduleDeadline(T0 + TIMEOUT, TIMEOUT)
    plain, effects = make([("a", [], 0)])
    assert plain.run.deadline_at is None and of(ScheduleDeadline, effects) == []


def test_past_the_deadline_running_steps_are_killed_the_rest_cancelled_and_the_run_fails() -> None:
    state = under_way()
    out = state.on_deadline(PAST)
    reason = state.run.reason
    assert reason is not None and reason.startswith("deadline")
    assert "60 s" in reason
    # Killed as a cancel kills them: the running attempt and the one a runner took.
    kills = {(k.runner, k.step_id, k.attempt, k.reason) for k in of(KillAttempt, out)}
    assert kills == {("r1", "a", 1, reason), ("r2", "c", 1, reason)}
    assert all(k.ticket == state.steps[k.step_id].ticket for k in of(KillAttempt, out))
    assert statuses(state) == {"a": "running", "b": "cancelled", "c": "cancelled"}
    assert state.steps["b"].reason == reason
    # The run ends once its killed step has reported: failed, with the reason.
    assert state.run.status == "running"
    finished(outcome="cancelled")(state)
    assert statuses(state) == {"a": "cancelled", "b": "cancelled", "c": "cancelled"}
    assert (state.run.status, state.run.reason) == ("failed", reason)
    assert state.steps["a"].reason == reason
    assert state.run.finished_at is not None
    # Each step's log says why.
    texts = [n.text for n in transition_notes(out)]
    assert f"cancelled: {reason}" in texts
    assert f"asking runner r1 to kill attempt 1: {reason}" in texts


def test_a_run_with_nothing_running_fails_at_its_deadline_at_once() -> None:
    state, _ = make([("a", [], 2)], timeout=TIMEOUT)
    started()(state)
    finished(outcome="failed")(state)
    assert state.steps["a"].status == "retrying"
    out = state.on_deadline(PAST)
    assert of(KillAttempt, out) == []
    assert (state.steps["a"].status, state.run.status) == ("cancelled", "failed")
    assert state.run.reason is not None and state.run.reason.startswith("deadline")


def test_a_killed_step_that_fails_or_succeeds_meanwhile_starts_nothing_more() -> None:
    state, _ = make([("a", [], 3), ("b", ["a"], 0)], timeout=TIMEOUT)
    started()(state)
    state.on_deadline(PAST)
    out = finished(outcome="failed")(state)  # its retries are not spent: no retry all the same
    assert of(ScheduleDeadline, out) == [] and state.steps["a"].status == "cancelled"
    assert state.run.status == "failed"
    won, _ = make([("a", [], 0), ("b", ["a"], 0)], timeout=TIMEOUT)
    started()(won)
    won.on_deadline(PAST)
    finished()(won)  # it succeeded before the kill reached it: b was cancelled all the same
    assert statuses(won) == {"a": "succeeded", "b": "cancelled"}
    assert won.run.status == "failed"


def test_a_deadline_after_the_run_ended_does_nothing() -> None:
    state, _ = make([("a", [], 0)], timeout=TIMEOUT)
    started()(state)
    finished()(state)
    assert state.run.status == "succeeded"
    assert state.on_deadline(PAST) == []
    assert (state.run.status, state.run.reason) == ("succeeded", None)


def test_a_cancel_and_a_deadline_do_not_undo_each_other() -> None:
    cancelled = under_way()
    cancel(cancelled)
    assert cancelled.on_deadline(PAST) == [] and cancelled.run.reason is None
    finished(outcome="cancelled")(cancelled)
    assert cancelled.run.status == "cancelled"
    late = under_way()
    late.on_deadline(PAST)
    assert cancel(late) == [] and not late.run.cancel_requested
    finished(outcome="cancelled")(late)
    assert late.run.status == "failed"


def test_a_timer_that_comes_early_is_set_again_here_and_stops_nothing() -> None:
    state = under_way()
    early = T0 + TIMEOUT - 30
    assert state.on_deadline(early) == [ScheduleDeadline(T0 + TIMEOUT, 30.0, durable=False)]
    assert state.run.reason is None and statuses(state)["a"] == "running"


def test_a_rebuilt_run_past_its_deadline_acts_at_once() -> None:
    again = rebuilt(under_way())
    out = again.resume(PAST)
    assert again.run.reason is not None and again.run.reason.startswith("deadline")
    assert {k.step_id for k in of(KillAttempt, out)} == {"a", "c"}
    assert statuses(again) == {"a": "running", "b": "cancelled", "c": "cancelled"}
    assert of(ScheduleDeadline, out) == []


def test_a_rebuilt_run_schedules_a_deadline_still_to_come_again() -> None:
    again = rebuilt(under_way())
    out = again.resume(T0 + 20)
    assert of(ScheduleDeadline, out) == [ScheduleDeadline(T0 + TIMEOUT, TIMEOUT - 20)]
    assert of(KillAttempt, out) == [] and again.run.reason is None


def test_a_rebuilt_run_that_was_stopping_at_its_deadline_is_stopped_again() -> None:
    """The crash fell after the run's record was stored with its reason: the kills are
    sent again (harmless if they went), no timer is set, and the run still fails."""
    state = under_way()
    state.on_deadline(PAST)
    again = rebuilt(state)
    out = again.resume(PAST + 10)
    assert {k.step_id for k in of(KillAttempt, out)} == {"a"}
    assert of(ScheduleDeadline, out) == []
    finished(outcome="cancelled")(again)
    assert again.run.status == "failed"
