"""Handing a readied step to the runner that just succeeded (RunState, with the policy's
handoff): which step is handed and to whom, what each answer leads to, and what a rebuilt
run does with a handoff whose answer was lost. Pure, no I/O."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from heddle.services.orchestrator.decisions import AwaitHandoff, Enqueue, PersistStep
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import step_record_decoder

from tests.support.run_states import POLICY, T0, cancel, finished, lost, make, rebuilt

HANDOFF = dataclasses.replace(POLICY, handoff=True)
CHAIN = [("a", [], 0), ("b", ["a"], 1)]


def enqueued(effects: list) -> list[Enqueue]:
    return [e for e in effects if isinstance(e, Enqueue)]


def handed_chain() -> RunState:
    """a -> b, a succeeded on r1: b is queued and handed to r1."""
    state, _ = make(CHAIN, policy=HANDOFF)
    finished(runner="r1")(state)
    return state


def test_a_success_hands_the_step_it_readies_to_its_runner() -> None:
    state, _ = make(CHAIN, policy=HANDOFF)
    out = finished(runner="r1")(state)
    [enq] = enqueued(out)
    assert (enq.ready.step_id, enq.handoff) == ("b", "r1")
    b = state.steps["b"]
    assert (b.status, b.offered_to, b.runner) == ("queued", "r1", None)
    # The queued record that is stored names the runner: a rebuilt run knows of the offer.
    [record] = [e.step for e in out if isinstance(e, PersistStep) and e.step.id == "b"]
    assert step_record_decoder.decode(msgspec.json.encode(record)).offered_to == "r1"


def test_without_the_policy_nothing_is_handed() -> None:
    state, _ = make(CHAIN)
    [enq] = enqueued(finished(runner="r1")(state))
    assert enq.handoff is None and state.steps["b"].offered_to is None


def test_a_fan_out_hands_one_step_and_gives_the_others_to_the_dispatchers() -> None:
    state, _ = make(
        [("a", [], 0), ("b", ["a"], 0), ("c", ["a"], 0), ("d", ["a"], 0)], policy=HANDOFF
    )
    handoffs = [e.handoff for e in enqueued(finished(runner="r1")(state))]
    assert handoffs == ["r1", None, None]
    assert [state.steps[s].offered_to for s in "bcd"] == ["r1", None, None]


def test_a_join_is_handed_to_the_runner_of_its_last_parent() -> None:
    state, _ = make([("a", [], 0), ("b", [], 0), ("c", ["a", "b"], 0)], policy=HANDOFF)
    assert enqueued(finished("a", runner="r1")(state)) == []
    [enq] = enqueued(finished("b", runner="r2")(state))
    assert (enq.ready.step_id, enq.handoff) == ("c", "r2")


@pytest.mark.parametrize("immediate", [False, True])
def test_a_failure_hands_nothing(immediate: bool) -> None:
    """A retry goes to the dispatchers: its runner just failed it, and a retry is timed."""
    state, _ = make([("a", [], 1)], policy=HANDOFF)
    if immediate:
        out = state.on_silent("a", 1, "runner went silent", T0 + 4)
    else:
        finished(outcome="failed", runner="r1")(state)
        out = state.on_retry_due("a", 2, T0 + 9)
    [enq] = enqueued(out)
    assert enq.handoff is None and state.steps["a"].offered_to is None


def test_an_accepted_handoff_names_the_attempts_runner() -> None:
    state = handed_chain()
    assert state.on_handoff_answer("b", 1, 0, "r1", "accepted") == []
    b = state.steps["b"]
    assert (b.status, b.runner, b.offered_to) == ("queued", "r1", None)


@pytest.mark.parametrize(("answer", "check"), [("refused", False), ("unanswered", True)])
def test_a_handoff_not_accepted_goes_to_the_dispatchers(answer: str, check: bool) -> None:
    """Refused, the runner does not have it; unanswered, it may, so the dispatchers look for
    it (its heartbeat, its outcome) and ask that runner again before they offer it."""
    state = handed_chain()
    [enq] = state.on_handoff_answer("b", 1, 0, "r1", answer)  # type: ignore[arg-type]
    assert enq.handoff is None
    assert (enq.ready.step_id, enq.ready.attempt, enq.ready.check) == ("b", 1, check)
    assert enq.ready.held_by == ("r1" if check else "")
    assert enq.ready.ticket == state.steps["b"].ticket
    assert state.steps["b"].offered_to is None
    # A second answer to the same offer changes nothing.
    assert state.on_handoff_answer("b", 1, 0, "r1", answer) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("answer", ["accepted", "refused", "unanswered"])
def test_an_answer_after_the_attempt_moved_on_changes_nothing(answer: str) -> None:
    """A short step's answer travels with its outcome: the outcome is often decided first."""
    state = handed_chain()
    finished("b", runner="r1")(state)
    before = msgspec.json.encode(state.steps["b"])
    assert state.on_handoff_answer("b", 1, 0, "r1", answer) == []  # type: ignore[arg-type]
    assert msgspec.json.encode(state.steps["b"]) == before


@pytest.mark.parametrize(
    ("attempt", "requeue", "runner"), [(2, 0, "r1"), (1, 1, "r1"), (1, 0, "r2")]
)
def test_an_answer_about_another_offer_changes_nothing(
    attempt: int, requeue: int, runner: str
) -> None:
    state = handed_chain()
    assert state.on_handoff_answer("b", attempt, requeue, runner, "refused") == []
    assert state.steps["b"].offered_to == "r1"


def test_no_answer_but_a_heartbeat_leaves_the_attempt_with_its_runner() -> None:
    state = handed_chain()
    state.on_heartbeat("b", 1, "r1", None)
    assert state.on_handoff_answer("b", 1, 0, "r1", "unanswered") == []
    assert state.steps["b"].runner == "r1"


def test_a_cancel_while_handed_off_ends_the_step_and_the_answer_changes_nothing() -> None:
    state = handed_chain()
    cancel(state)
    assert state.steps["b"].status == "cancelled"
    assert state.on_handoff_answer("b", 1, 0, "r1", "refused") == []


def test_a_lost_finding_requeues_to_the_dispatchers() -> None:
    state = handed_chain()
    [enq] = enqueued(lost("b")(state))
    assert enq.handoff is None and state.steps["b"].offered_to is None


def test_a_rebuilt_run_awaits_a_lost_answer_and_then_asks_the_dispatchers_to_look() -> None:
    """The offer's answer died with its orchestrator: no ready message is sent at once (the
    runner may hold the attempt); once a runner would have answered, it goes to the
    dispatchers marked to be looked for."""
    again = rebuilt(handed_chain(), HANDOFF)
    out = again.resume(T0 + 5)
    assert enqueued(out) == []
    [wait] = [e for e in out if isinstance(e, AwaitHandoff)]
    assert (wait.step_id, wait.attempt, wait.requeue, wait.runner) == ("b", 1, 0, "r1")
    [enq] = again.on_handoff_answer("b", 1, 0, "r1", "unanswered")
    assert enq.ready.check and enq.ready.held_by == "r1" and enq.handoff is None


def test_a_rebuilt_run_sends_a_step_queued_for_the_dispatchers_again() -> None:
    state = handed_chain()
    state.on_handoff_answer("b", 1, 0, "r1", "refused")
    [enq] = enqueued(rebuilt(state, HANDOFF).resume(T0 + 5))
    assert (enq.ready.step_id, enq.ready.check, enq.handoff) == ("b", False, None)
