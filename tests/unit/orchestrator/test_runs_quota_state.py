"""A namespace's runs-under-way quota in the run's state machine: a run of a namespace with
one is stored waiting until it holds its own key (if any), then the quota's key, then takes
its turn; it gives the quota back however it ends, and asks again when rebuilt
(services/orchestrator/key_answers.py, decisions.giving_back)."""

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
from heddle.shared.core.quotas import runs_key
from heddle.shared.wire.contracts import SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import T0, cancel, finish_step, made, rebuilt, spec, statuses

RUN = "team-a=run-1"
QUOTA = runs_key("team-a")
KEY = "team-a=deploy"


def quota_run(**fields: Any) -> tuple[RunState, list]:
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[spec("a")],
        priority=2,
        **fields,
    )
    state, effects = made(cmd, admitted=False, runs_quota=True)
    return state, giving_back(effects)


def take_quota() -> TakeKey:
    return TakeKey(QUOTA, 0, "queue", 2, quota=True)


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def test_a_run_under_a_quota_is_stored_waiting_and_asks_for_it() -> None:
    state, effects = quota_run()
    run = state.run
    assert run.waiting and run.runs_quota and run.quota_wait
    assert set(statuses(state).values()) == {"pending"}
    assert of(Enqueue, effects) == []
    assert effects[-1] == take_quota()
    assert effects.index(take_quota()) > effects.index(of(PersistRun, effects)[-1])


def test_at_the_quota_it_names_a_holder_then_goes_at_its_turn() -> None:
    state, _ = quota_run()
    assert state.on_quota_taken(False, "team-a=r0", False, T0 + 1) == [PersistRun(state.run)]
    assert state.run.quota_wait and state.run.concurrency_holder == "team-a=r0"
    assert state.on_quota_taken(False, "team-a=r0", False, T0 + 1) == []  # nothing new
    assert state.on_key_free() == [take_quota()]
    effects = state.on_quota_taken(True, None, True, T0 + 2)
    assert not state.run.waiting and not state.run.quota_wait
    assert state.run.concurrency_holder is None
    assert [e.ready.step_id for e in of(Enqueue, effects)] == ["a"]
    assert state.on_quota_taken(True, None, True, T0 + 2) == []  # under way already


def test_held_but_not_admitted_it_waits_its_turn_among_the_runs_under_way() -> None:
    state, _ = quota_run()
    assert state.on_quota_taken(True, None, False, T0 + 1) == [PersistRun(state.run)]
    assert state.run.waiting and not state.run.quota_wait
    assert state.on_key_free() == []
    assert [e.ready.step_id for e in of(Enqueue, state.admit(T0 + 2))] == ["a"]


def test_with_a_key_of_its_own_it_takes_the_key_first_then_the_quota() -> None:
    state, effects = quota_run(concurrency_key=KEY)
    take_key = TakeKey(KEY, 1, "queue", 2, admits=False)  # holding it admits nothing yet
    assert effects[-1] == take_key
    assert state.on_key_taken(False, "team-a=r0", False, False, T0 + 1)
    assert state.run.quota_wait and state.run.concurrency_wait == KEY
    effects = state.on_key_taken(True, None, False, False, T0 + 1)
    assert effects == [PersistRun(state.run), take_quota()]
    assert state.run.waiting and state.run.concurrency_wait is None
    assert state.run.concurrency_holder is None
    assert state.on_key_taken(True, None, False, False, T0 + 1) == []  # the quota asked once
    effects = state.on_quota_taken(True, None, True, T0 + 2)
    assert [e.ready.step_id for e in of(Enqueue, effects)] == ["a"]


def test_refused_its_key_it_fails_waiting_for_no_quota() -> None:
    state, _ = quota_run(concurrency_key=KEY, on_limit="refuse")
    effects = giving_back(state.on_key_taken(False, "team-a=r0", True, False, T0 + 1))
    assert state.run.status == "failed"
    assert of(TakeKey, effects) == []
    assert of(LeaveKey, effects) == [LeaveKey(KEY), LeaveKey(QUOTA, quota=True)]


def test_it_gives_the_quota_back_when_it_ends() -> None:
    state, _ = quota_run(concurrency_key=KEY)
    state.on_key_taken(True, None, False, False, T0 + 1)
    state.on_quota_taken(True, None, True, T0 + 2)
    effects = giving_back(finish_step(state, "a"))
    assert state.run.status == "succeeded"
    assert of(LeaveKey, effects) == [LeaveKey(KEY), LeaveKey(QUOTA, quota=True)]


def test_cancelled_while_it_waits_it_leaves_the_line_and_gives_back_a_late_answer() -> None:
    state, _ = quota_run()
    effects = giving_back(cancel(state))
    assert state.run.status == "cancelled"
    assert of(LeaveKey, effects) == [LeaveKey(QUOTA, quota=True)]
    assert state.on_quota_taken(True, None, True, T0 + 6) == [LeaveKey(QUOTA, quota=True)]
    assert state.on_key_free() == []


def test_rebuilt_it_asks_for_what_it_waits_for() -> None:
    state, _ = quota_run(concurrency_key=KEY)
    assert rebuilt(state).resume(T0 + 1)[-1] == TakeKey(KEY, 1, "queue", 2, admits=False)
    state.on_key_taken(True, None, False, False, T0 + 1)
    assert rebuilt(state).resume(T0 + 2)[-1] == take_quota()


def test_a_run_without_the_quota_takes_and_gives_back_nothing_of_it() -> None:
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=[spec("a")])
    state, effects = made(cmd)
    assert not state.run.runs_quota and of(TakeKey, effects) == []
    assert of(LeaveKey, giving_back(finish_step(state, "a"))) == []
