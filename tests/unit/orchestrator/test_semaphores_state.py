"""A step's semaphores in the run's state machine: asked for before the step is queued,
queued once held, given back however the step ends (services/orchestrator/slot_answers.py,
transitions.py, decisions.giving_back)."""

from __future__ import annotations

from heddle.services.orchestrator.decisions import (
    Enqueue,
    GiveBack,
    Ignored,
    ScheduleRetry,
    TakeSlots,
    giving_back,
)
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import (
    RUN,
    T0,
    cancel,
    finish_step,
    made,
    rebuilt,
    retry_due,
    silent,
    spec,
    started,
    statuses,
)


def run_of(*steps) -> tuple[RunState, list]:  # type: ignore[no-untyped-def]
    state, effects = made(SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=list(steps)))
    return state, giving_back(effects)


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def granted(state: RunState, step: str) -> list:
    return giving_back(state.on_slots(step, state.steps[step].attempt + 1, None, T0 + 1))


def test_a_step_asks_for_its_slots_in_name_order_before_it_is_queued() -> None:
    state, effects = run_of(spec("a", semaphores=["web", "db"]), spec("b"))
    a = state.steps["a"]
    assert a.status == "pending" and a.semaphore_wait == "db"
    assert of(TakeSlots, effects) == [TakeSlots("a", 1, ("db", "web"), from_epoch(T0))]
    assert [e.ready.step_id for e in of(Enqueue, effects)] == ["b"]  # b has none: queued


def test_a_step_waits_then_is_queued_once_it_holds_every_slot() -> None:
    state, _ = run_of(spec("a", semaphores=["db", "web"]))
    assert state.on_slots("a", 1, "web", T0 + 1)  # db held, web not: stored as waiting for web
    assert state.steps["a"].semaphore_wait == "web"
    assert state.on_slots("a", 1, "web", T0 + 1) == []  # nothing new
    effects = granted(state, "a")
    a = state.steps["a"]
    assert a.status == "queued" and a.attempt == 1 and a.semaphore_wait is None
    assert [e.ready.step_id for e in of(Enqueue, effects)] == ["a"]


def test_a_slot_freed_asks_again_only_for_a_waiting_step() -> None:
    state, _ = run_of(spec("a", semaphores=["db"]), spec("b"))
    assert state.on_slot_free("a", T0 + 1) == [TakeSlots("a", 1, ("db",), from_epoch(T0 + 1))]
    assert state.on_slot_free("b", T0 + 1) == []
    granted(state, "a")
    assert state.on_slot_free("a", T0 + 1) == []  # queued: holds them already


def test_slots_are_given_back_when_the_step_succeeds_or_fails() -> None:
    for outcome in ("succeeded", "failed"):
        state, _ = run_of(spec("a", semaphores=["db"]))
        granted(state, "a")
        effects = giving_back(finish_step(state, "a", outcome))
        assert of(GiveBack, effects) == [GiveBack("a", ("db",))]
        assert state.steps["a"].status == outcome


def test_the_runners_death_verdict_gives_the_slot_back() -> None:
    state, _ = run_of(spec("a", semaphores=["db"]))
    granted(state, "a")
    started()(state)
    effects = giving_back(silent()(state))
    assert state.steps["a"].status == "failed"
    assert of(GiveBack, effects) == [GiveBack("a", ("db",))]


def test_an_immediate_retry_keeps_its_slots() -> None:
    state, _ = run_of(spec("a", semaphores=["db"], retries=1))
    granted(state, "a")
    started()(state)
    effects = giving_back(silent()(state))
    assert state.steps["a"].status == "queued" and state.steps["a"].attempt == 2
    assert of(GiveBack, effects) == [] and of(TakeSlots, effects) == []


def test_a_backoff_gives_the_slots_back_and_the_retry_asks_again() -> None:
    state, _ = run_of(spec("a", semaphores=["db"], retries=1))
    granted(state, "a")
    effects = giving_back(finish_step(state, "a", "failed"))
    assert of(ScheduleRetry, effects) and of(GiveBack, effects) == [GiveBack("a", ("db",))]
    effects = retry_due()(state)
    assert state.steps["a"].status == "pending" and state.steps["a"].semaphore_wait == "db"
    assert of(TakeSlots, effects) == [TakeSlots("a", 2, ("db",), from_epoch(T0 + 3))]
    granted(state, "a")
    assert state.steps["a"].status == "queued" and state.steps["a"].attempt == 2


def test_a_waiting_step_cancelled_gives_back_its_place() -> None:
    state, _ = run_of(spec("a", semaphores=["db"]))
    effects = giving_back(cancel(state))
    assert state.steps["a"].status == "cancelled" and state.steps["a"].semaphore_wait is None
    assert of(GiveBack, effects) == [GiveBack("a", ("db",))]
    # The slots it was given meanwhile go back at once, and a place in line too.
    assert state.on_slots("a", 1, None, T0 + 6) == [GiveBack("a", ("db",))]
    assert state.on_slots("a", 1, "db", T0 + 6) == [GiveBack("a", ("db",))]


def test_a_late_or_stale_answer_changes_nothing() -> None:
    state, _ = run_of(spec("a", semaphores=["db"]))
    assert of(Ignored, state.on_slots("a", 7, None, T0 + 1))
    assert state.steps["a"].status == "pending"
    granted(state, "a")
    assert of(Ignored, state.on_slots("a", 1, None, T0 + 1))  # queued: holds them, keeps them


def test_a_rebuilt_run_asks_again_for_a_waiting_step() -> None:
    state, _ = run_of(spec("a", semaphores=["db"]), spec("b", ("a",), semaphores=["db"]))
    again = rebuilt(state)
    effects = again.resume(T0 + 10)
    assert of(TakeSlots, effects) == [TakeSlots("a", 1, ("db",), from_epoch(T0 + 10))]
    assert statuses(again) == {"a": "pending", "b": "pending"}


def test_a_step_with_semaphores_is_neither_handed_off_nor_continued() -> None:
    from heddle.services.orchestrator.run_steps import Policy

    policy = Policy(handoff=True, continuations=True)
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[spec("a"), spec("b", ("a",), semaphores=["db"])],
    )
    state, effects = made(cmd, policy)
    assert not [e for e in effects if getattr(e, "ready", None) and e.ready.then is not None]
    effects = finish_step(state, "a")
    assert state.steps["b"].status == "pending" and of(TakeSlots, effects)
    assert state.steps["b"].offered_to is None


def test_a_foreach_step_s_instances_each_ask() -> None:
    state, effects = run_of(spec("a", for_each='["x", "y"]', semaphores=["db"]))
    assert [e.step_id for e in of(TakeSlots, effects)] == ["a[0]", "a[1]"]
    assert state.steps["a"].status == "running"  # the step itself takes none
    assert state.steps["a[0]"].semaphore_wait == "db"
    granted(state, "a[0]")
    effects = giving_back(finish_step(state, "a[0]"))
    assert of(GiveBack, effects) == [GiveBack("a[0]", ("db",))]
