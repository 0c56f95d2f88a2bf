"""A run's window (Policy.window, HEDDLE_RUN_WINDOW): at most so many of its steps queued or
running, the other ready ones held back in the order they became ready and queued as places
free (RunState.release, which the actor calls after every batch). Pure, no I/O."""

from __future__ import annotations

import dataclasses

from heddle.services.orchestrator.decisions import Enqueue, PersistStep
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import POLICY, RUN, T0, finish_step, made, rebuilt, spec, statuses

WINDOW = dataclasses.replace(POLICY, window=lambda: 3)


def run_of(*steps, policy=WINDOW) -> tuple[RunState, list]:
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=list(steps))
    return made(cmd, policy)


def queued(state: RunState) -> list[str]:
    return [
        sid
        for sid, step in state.steps.items()
        if step.status in ("queued", "running") and step.for_each is None
    ]


def enqueued(effects: list) -> list[str]:
    return [e.ready.step_id for e in effects if isinstance(e, Enqueue)]


def test_a_run_opens_with_no_more_steps_than_its_window_and_stores_the_rest_pending() -> None:
    _, out = run_of(*(spec(f"r{i}") for i in range(6)))
    assert enqueued(out) == ["r0", "r1", "r2"]
    written = {e.step.id: e.step.status for e in out if isinstance(e, PersistStep)}
    assert written == {"r0": "queued", "r1": "queued", "r2": "queued"} | {
        f"r{i}": "pending" for i in (3, 4, 5)
    }


def test_a_fan_out_is_held_back_and_let_go_as_its_steps_land_in_order() -> None:
    state, _ = run_of(spec("a"), *(spec(f"b{i}", ("a",)) for i in range(6)))
    finish_step(state, "a")
    assert queued(state) == ["b0", "b1", "b2"]
    assert state.release(T0 + 2) == []  # the window is full
    finish_step(state, "b1")
    assert enqueued(state.release(T0 + 3)) == ["b3"]
    finish_step(state, "b0")
    finish_step(state, "b2")
    assert enqueued(state.release(T0 + 4)) == ["b4", "b5"]
    for sid in ("b3", "b4", "b5"):
        finish_step(state, sid)
    state.release(T0 + 5)
    assert state.run.status == "succeeded"


def test_a_failure_lands_too_and_what_it_skips_is_not_let_go() -> None:
    state, _ = run_of(
        spec("a"), spec("b", ("a",)), spec("c", ("a",)), spec("d", ("a",)), spec("e", ("d",))
    )
    state.steps["d"].retries = 0
    finish_step(state, "a")
    finish_step(state, "b")
    finish_step(state, "c")
    assert enqueued(state.release(T0 + 3)) == []  # nothing held: all three fit
    finish_step(state, "d", "failed")
    assert statuses(state)["e"] == "skipped" and state.release(T0 + 4) == []


def test_a_cancel_ends_the_held_steps_and_lets_none_go() -> None:
    state, _ = run_of(*(spec(f"r{i}") for i in range(5)))
    state.cancel(T0 + 1)
    assert state.release(T0 + 2) == []
    assert {statuses(state)[f"r{i}"] for i in (3, 4)} == {"cancelled"}


def test_a_rebuilt_run_holds_back_again_what_was_held() -> None:
    state, _ = run_of(*(spec(f"r{i}") for i in range(5)))
    again = rebuilt(state, WINDOW)
    effects = again.resume(T0 + 10)
    assert set(enqueued(effects)) == {"r0", "r1", "r2"}  # sent again, harmless by message id
    finish_step(again, "r0")
    assert enqueued(again.release(T0 + 11)) == ["r3"]


def test_a_loops_instances_are_held_and_a_failed_loop_skips_them() -> None:
    state, _ = run_of(spec("each", for_each='["a","b","c","d","e"]'))
    assert queued(state) == ["each[0]", "each[1]", "each[2]"]
    finish_step(state, "each[0]", "failed")
    state.release(T0 + 3)
    assert {statuses(state)[f"each[{i}]"] for i in (3, 4)} == {"skipped"}
    assert statuses(state)["each"] == "failed"


def test_no_window_holds_nothing() -> None:
    _, out = run_of(*(spec(f"r{i}") for i in range(20)), policy=POLICY)
    assert len(enqueued(out)) == 20
