"""A namespace's running-steps quota in the run's state machine: each step of a namespace
with one takes the namespace's implicit semaphore with its own before it is queued, gives it
back however it ends, and one of a namespace without takes nothing (transitions.py,
continuations.py, shared/core/quotas.py)."""

from __future__ import annotations

import dataclasses

from heddle.services.orchestrator.decisions import Enqueue, GiveBack, TakeSlots, giving_back
from heddle.services.orchestrator.state import RunState
from heddle.shared.core.quotas import steps_semaphore, with_quota
from heddle.shared.wire.contracts import SubmitRun
from heddle.shared.wire.timefmt import from_epoch

from tests.support.run_states import POLICY, RUN, T0, finish_step, made, spec

QUOTA = steps_semaphore("default")  # RUN is default's
QUOTAED = dataclasses.replace(POLICY, step_quota=lambda ns: 2 if ns == "default" else None)
ELSEWHERE = dataclasses.replace(POLICY, step_quota=lambda ns: 2 if ns == "team-a" else None)


def run_of(policy, *steps, handoff: bool = False) -> tuple[RunState, list]:  # type: ignore[no-untyped-def]
    policy = dataclasses.replace(policy, handoff=handoff, continuations=handoff)
    cmd = SubmitRun(run_id=RUN, submitted_at=from_epoch(T0), steps=list(steps))
    state, effects = made(cmd, policy)
    return state, giving_back(effects)


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def test_a_step_of_a_namespace_with_a_quota_takes_it_with_its_semaphores() -> None:
    state, effects = run_of(QUOTAED, spec("a"), spec("b", semaphores=["web"]))
    assert state.steps["a"].status == "pending"
    assert state.steps["a"].semaphore_wait == QUOTA
    assert of(TakeSlots, effects) == [
        TakeSlots("a", 1, (QUOTA,), from_epoch(T0)),
        TakeSlots("b", 1, tuple(sorted((QUOTA, "web"))), from_epoch(T0)),
    ]
    assert of(Enqueue, effects) == []


def test_a_step_of_a_namespace_without_takes_nothing() -> None:
    state, effects = run_of(ELSEWHERE, spec("a"), spec("b", semaphores=["web"]))
    assert state.steps["a"].status == "queued" and state.steps["a"].semaphores == []
    assert of(TakeSlots, effects) == [TakeSlots("b", 1, ("web",), from_epoch(T0))]


def test_the_quota_held_is_given_back_when_the_step_ends() -> None:
    state, _ = run_of(QUOTAED, spec("a"), spec("b", ("a",)))
    state.on_slots("a", 1, None, T0 + 1)
    assert state.steps["a"].status == "queued"
    effects = giving_back(finish_step(state, "a"))
    assert GiveBack("a", (QUOTA,)) in effects
    assert of(TakeSlots, effects) == [TakeSlots("b", 1, (QUOTA,), of(TakeSlots, effects)[0].since)]


def test_no_successor_is_prepared_past_the_quota() -> None:
    state, _ = run_of(QUOTAED, spec("a"), spec("b", ("a",)), handoff=True)
    effects = state.on_slots("a", 1, None, T0 + 1)
    assert [e.ready.step_id for e in of(Enqueue, effects)] == ["a"]
    assert of(Enqueue, effects)[0].ready.then is None  # b is not carried along with a
    assert (state.steps["b"].status, state.steps["b"].ticket) == ("pending", "")


def test_with_quota_adds_drops_or_keeps_the_quota() -> None:
    own = ["db", "web"]
    assert with_quota(own, None) is own  # nothing made on the hot path
    assert with_quota(own, QUOTA) == ["db", "web", QUOTA]
    assert with_quota([*own, QUOTA], QUOTA) == ["db", "web", QUOTA]
    assert with_quota([*own, QUOTA], None) == own
    assert with_quota([], None) == []
