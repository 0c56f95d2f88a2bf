"""A run's concurrency key in the run's state machine: stored waiting until it holds the
key, admitted once it does, failed at once if refused, giving it back however it ends, and
cancelled for another run once only (services/orchestrator/key_answers.py, state.py,
decisions.giving_back)."""

from __future__ import annotations

from typing import Any

from heddle.services.orchestrator.decisions import (
    Enqueue,
    LeaveKey,
    PersistRun,
    TakeKey,
    giving_back,
)
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import RUN, T0, cancel, finish_step, made, rebuilt, spec, statuses

KEY = "deploy/prod"
TAKE = TakeKey(KEY, 1, "queue", 3)


def keyed(**fields: Any) -> tuple[RunState, list]:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[spec("a"), spec("b", ("a",))],
        on_exit=[spec("bye")],
        priority=3,
        concurrency_key=KEY,
        **fields,
    )
    state, effects = made(cmd, admitted=False)
    return state, giving_back(effects)


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def test_a_run_with_a_key_is_stored_waiting_and_then_asks_for_it() -> None:
    state, effects = keyed()
    run = state.run
    assert run.waiting and run.concurrency_wait == KEY and run.concurrency_holder is None
    assert set(statuses(state).values()) == {"pending"}
    assert of(Enqueue, effects) == []
    assert effects[-1] == TAKE
    assert of(PersistRun, effects)[-1].run is run
    assert effects.index(TAKE) > effects.index(of(PersistRun, effects)[-1])


def test_held_and_admitted_its_first_steps_are_queued() -> None:
    state, _ = keyed()
    effects = state.on_key_taken(True, None, False, True, T0 + 1)
    assert not state.run.waiting and state.run.concurrency_wait is None
    assert [e.ready.step_id for e in of(Enqueue, effects)] == ["a"]
    assert state.on_key_taken(True, None, False, True, T0 + 1) == []  # under way already


def test_held_while_the_runs_under_way_are_at_their_bound_it_waits_its_turn() -> None:
    state, _ = keyed()
    effects = state.on_key_taken(True, None, False, False, T0 + 1)
    assert effects == [PersistRun(state.run)]
    assert state.run.waiting and state.run.concurrency_wait is None
    assert state.on_key_taken(True, None, False, False, T0 + 1) == []  # nothing new
    assert [e.ready.step_id for e in of(Enqueue, state.admit(T0 + 2))] == ["a"]


def test_queued_it_names_the_holder_and_asks_again_at_its_turn() -> None:
    state, _ = keyed()
    assert state.on_key_taken(False, "r0", False, False, T0 + 1) == [PersistRun(state.run)]
    assert (state.run.concurrency_wait, state.run.concurrency_holder) == (KEY, "r0")
    assert state.on_key_taken(False, "r0", False, False, T0 + 1) == []
    assert state.on_key_free() == [TAKE]
    state.on_key_taken(True, None, False, True, T0 + 2)
    assert state.run.concurrency_holder is None
    assert state.on_key_free() == []  # under way: nothing to ask


def test_refused_it_fails_at_once_having_begun_nothing() -> None:
    state, _ = keyed(on_limit="refuse")
    effects = giving_back(state.on_key_taken(False, "r0", True, False, T0 + 1))
    run = state.run
    assert run.status == "failed" and run.reason == f"refused: concurrency key {KEY} held by run r0"
    assert set(statuses(state).values()) == {"cancelled"}  # the exit handler too
    assert of(LeaveKey, effects) == [LeaveKey(KEY)]
    assert run.concurrency_wait is None


def test_cancelled_while_it_waits_it_leaves_the_queue_and_gives_back_a_late_answer() -> None:
    state, _ = keyed()
    effects = giving_back(cancel(state))
    assert state.run.status == "cancelled"
    assert of(LeaveKey, effects) == [LeaveKey(KEY)]
    assert state.on_key_taken(True, None, False, True, T0 + 6) == [LeaveKey(KEY)]
    assert state.on_key_free() == []


def test_it_gives_its_key_back_when_it_ends() -> None:
    state, _ = keyed()
    state.on_key_taken(True, None, False, True, T0 + 1)
    assert of(LeaveKey, giving_back(finish_step(state, "a"))) == []
    finish_step(state, "b")
    effects = giving_back(finish_step(state, "bye"))
    assert state.run.status == "succeeded"
    assert of(LeaveKey, effects) == [LeaveKey(KEY)]


def test_a_run_without_a_key_gives_none_back() -> None:
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=[spec("a")])
    state, effects = made(cmd)
    assert of(TakeKey, effects) == []
    assert of(LeaveKey, giving_back(finish_step(state, "a"))) == []


def test_cancelled_for_another_run_it_is_a_first_cancel_only() -> None:
    state, _ = keyed()
    state.on_key_taken(True, None, False, True, T0 + 1)
    why = "cancelled for run r9: concurrency key deploy/prod (onLimit cancelRunning)"
    assert state.cancel(T0 + 2, why)
    assert state.run.cancel_requested and state.run.reason == why
    assert state.cancel(T0 + 3, why) == []  # sent again: the exit handler still runs
    assert not state.run.exit_cancelled
    copy = rebuilt(state)
    again = copy.resume(T0 + 4)  # a restart cancels as often as it was cancelled: once
    assert again and not any(isinstance(e, TakeKey) for e in again)
    assert copy.run.reason == why and not copy.run.exit_cancelled
    state.cancel(T0 + 5)  # a person's second cancel stops it
    assert state.run.exit_cancelled


def test_resumed_a_run_waiting_for_its_key_asks_again() -> None:
    state, _ = keyed()
    assert rebuilt(state).resume(T0 + 1)[-1] == TAKE
    state.on_key_taken(False, "r0", False, False, T0 + 1)
    assert rebuilt(state).resume(T0 + 2)[-1] == TAKE
    state.on_key_taken(True, None, False, False, T0 + 3)  # held, waiting its turn
    assert not any(isinstance(e, TakeKey) for e in rebuilt(state).resume(T0 + 4))


def test_past_its_deadline_while_it_waits_it_runs_its_exit_handlers_once_it_holds_the_key() -> None:
    state, _ = keyed(timeout_seconds=10)
    state.on_key_taken(False, "r0", False, False, T0 + 1)
    state.on_deadline(T0 + 11)
    assert statuses(state) == {"a": "cancelled", "b": "cancelled", "bye": "pending"}
    assert state.on_key_free() == [TAKE]  # its turn still comes
    effects = state.on_key_taken(True, None, False, True, T0 + 12)
    assert [e.ready.step_id for e in of(Enqueue, effects)] == ["bye"]
    effects = giving_back(finish_step(state, "bye"))
    assert state.run.status == "failed" and of(LeaveKey, effects) == [LeaveKey(KEY)]
