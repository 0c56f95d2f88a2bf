"""Steps with runsOn in the run's state machine: handed or continued only to a runner that
took the same labels, the labels on the ready message, and the no-runner verdict. Pure."""

from __future__ import annotations

import dataclasses

from heddle.services.orchestrator.decisions import Continue, Enqueue, PersistRun
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import POLICY, RUN, T0, finished, made

HANDOFF = dataclasses.replace(POLICY, handoff=True)
CONTINUING = dataclasses.replace(POLICY, handoff=True, continuations=True)


def run_of(*steps: tuple[str, list[str], list[str]], policy=HANDOFF) -> tuple[RunState, list]:
    """Steps as (id, dependencies, runsOn)."""
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[StepSpec(id=s, command="true", depends_on=d, runs_on=on) for s, d, on in steps],
    )
    return made(cmd, policy)


def enqueued(effects: list) -> dict[str, Enqueue]:
    return {e.ready.step_id: e for e in effects if isinstance(e, Enqueue)}


def test_the_ready_message_carries_the_labels_asked_for() -> None:
    _, out = run_of(("a", [], ["gpu", "a100"]))
    assert enqueued(out)["a"].ready.runs_on == ("gpu", "a100")


def test_a_step_asking_other_labels_is_not_handed_to_the_runner_that_freed_up() -> None:
    state, _ = run_of(("a", [], []), ("b", ["a"], ["gpu"]), ("c", ["a"], []))
    out = enqueued(finished(runner="r1")(state))
    # b may not be r1's to take; c, asking what a asked, is handed in its place.
    assert (out["b"].handoff, out["c"].handoff) == (None, "r1")


def test_the_same_labels_in_another_order_are_handed() -> None:
    state, _ = run_of(("a", [], ["x", "y"]), ("b", ["a"], ["y", "x"]))
    assert enqueued(finished(runner="g1")(state))["b"].handoff == "g1"


def test_a_chain_is_continued_only_while_it_asks_the_same_labels() -> None:
    state, _ = run_of(("a", [], []), ("b", ["a"], []), ("c", ["b"], ["gpu"]), policy=CONTINUING)
    out = finished(runner="r1")(state)
    assert enqueued(out)["b"].handoff == "r1"
    continued = [e.ready.step_id for e in out if isinstance(e, Continue)]
    assert continued == [], continued  # b's successor c asks for gpu: not prepared on r1


def test_no_runner_fails_the_queued_attempt_for_good_and_ends_the_run() -> None:
    state, _ = run_of(("a", [], ["tpu"]), ("b", ["a"], []))
    state.steps["a"].retries = 3
    out = state.on_no_runner("a", 1, "no runner has the labels tpu", T0 + 5)
    a, b = state.steps["a"], state.steps["b"]
    assert (a.status, a.reason) == ("failed", "no runner has the labels tpu")
    assert a.attempts[-1].reason == "no runner has the labels tpu"
    assert b.status == "skipped"
    assert any(isinstance(e, PersistRun) and e.run.status == "failed" for e in out)


def test_a_late_no_runner_verdict_is_ignored() -> None:
    state, _ = run_of(("a", [], ["tpu"]))
    state.on_no_runner("a", 2, "stale", T0 + 5)  # another attempt
    assert state.steps["a"].status == "queued"
