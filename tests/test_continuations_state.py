"""Continuing a chain (RunState with the policy's handoff and continuations): which steps a
handed-off step takes along, what the runner's outcome makes of them, and what voids them.
Pure, no I/O."""

from __future__ import annotations

import dataclasses

import msgspec
from heddle.services.orchestrator.continuations import ANY_RUNNER, CONTINUATION_DEPTH
from heddle.services.orchestrator.decisions import (
    AwaitHandoff,
    Continue,
    Enqueue,
    KillAttempt,
    PersistStep,
    ScheduleRetry,
)
from heddle.services.orchestrator.state import RunState
from heddle.shared.wire.contracts import StepFinished, step_record_decoder
from heddle.shared.wire.timefmt import from_epoch

from tests.test_state_machine import POLICY, RUN, T0, cancel, make, started

CONTINUING = dataclasses.replace(POLICY, handoff=True, continuations=True)
LINE = "abcdefg"  # a -> b -> ... -> g


def chain(retries: int = 0) -> list[tuple[str, list[str], int]]:
    return [(s, [LINE[i - 1]] if i else [], retries) for i, s in enumerate(LINE)]


def done(
    state: RunState,
    step: str,
    *,
    runner: str = "r1",
    outcome: str = "succeeded",
    continued: str = "",
    outputs: dict[str, str] | None = None,
    attempt: int | None = None,
    continued_ticket: str | None = None,
) -> list:
    rec = state.steps[step]
    ev = StepFinished(
        run_id=RUN,
        step_id=step,
        attempt=rec.attempt if attempt is None else attempt,
        runner=runner,
        ticket=rec.ticket,
        outcome=outcome,  # type: ignore[arg-type]
        finished_at=from_epoch(T0 + 2),
        exit_code=0 if outcome == "succeeded" else 1,
        outputs=outputs or {},
        continued=continued,
        # The runner reports the ticket the continuation ran under: the prepared one.
        continued_ticket=(
            continued_ticket
            if continued_ticket is not None
            else state.steps[continued].ticket
            if continued in state.steps
            else ""
        ),
    )
    return state.on_finished(ev, T0 + 2)


def of(kind: type, effects: list) -> list:
    return [e for e in effects if isinstance(e, kind)]


def handed_b(retries: int = 0, policy=CONTINUING) -> tuple[RunState, list]:
    """a succeeded on r1: b is handed to r1, and takes the next steps of the chain along."""
    state, _ = make(chain(retries), policy=policy)
    return state, done(state, "a")


def test_a_handed_off_step_takes_the_next_steps_of_its_chain_along() -> None:
    state, out = handed_b()
    [enq] = of(Enqueue, out)
    assert (enq.ready.step_id, enq.handoff) == ("b", "r1")
    sent = of(Continue, out)
    assert CONTINUATION_DEPTH == 3
    assert [(c.ready.step_id, c.ready.after, c.ready.after_attempt) for c in sent] == [
        ("c", "b", 1),
        ("d", "c", 1),
        ("e", "d", 1),
    ]
    assert {c.runner for c in sent} == {"r1"}
    for c in sent:
        rec = state.steps[c.ready.step_id]
        # Still pending, but its ticket stored (with its record) before it is sent.
        assert (rec.status, rec.attempt, rec.offered_to) == ("pending", 0, "r1")
        assert c.ready.attempt == 1 and c.ready.ticket == rec.ticket != ""
        # It follows the attempt before it as given: that one's ticket.
        assert c.ready.after_ticket == state.steps[c.ready.after].ticket != ""
        [record] = [e.step for e in out if isinstance(e, PersistStep) and e.step.id == rec.id]
        stored = step_record_decoder.decode(msgspec.json.encode(record))
        assert (stored.ticket, stored.offered_to) == (rec.ticket, "r1")
    assert state.steps["f"].offered_to is None


def test_a_continuation_started_is_queued_as_a_handoff_accepted_and_the_chain_goes_on() -> None:
    state, _ = handed_b()
    ticket = state.steps["c"].ticket
    out = done(state, "b", continued="c")
    c = state.steps["c"]
    assert (c.status, c.attempt, c.offered_to, c.ticket) == ("queued", 1, "r1", ticket)
    assert state.steps["b"].status == "succeeded"
    assert of(Enqueue, out) == []  # no offer, no ready message: the runner has it
    assert of(AwaitHandoff, out) == [AwaitHandoff("c", 1, 0, "r1", continued=True)]
    # One step more of the chain is prepared; those prepared already are left as they are.
    assert [(e.ready.step_id, e.ready.after) for e in of(Continue, out)] == [("f", "e")]
    # Its outcome, with the prepared ticket, counts.
    out = done(state, "c", continued="d")
    assert state.steps["c"].status == "succeeded" and state.steps["d"].status == "queued"
    assert of(KillAttempt, out) == []


def test_an_outcome_without_its_continuation_hands_the_next_step_off_afresh() -> None:
    state, _ = handed_b()
    prepared = state.steps["c"].ticket
    out = done(state, "b")
    [enq] = of(Enqueue, out)
    c = state.steps["c"]
    assert (enq.ready.step_id, enq.handoff, c.status) == ("c", "r1", "queued")
    assert c.ticket != prepared  # a new attempt for the runner: the prepared one was not run
    # What followed c's prepared attempt is prepared again, to follow c as given now.
    sent = of(Continue, out)
    assert [(e.ready.step_id, e.ready.after_ticket) for e in sent] == [
        ("d", c.ticket),
        ("e", state.steps["d"].ticket),
        ("f", state.steps["e"].ticket),
    ]


def test_continuations_made_for_a_runner_that_refused_are_made_again_for_the_next() -> None:
    """b handed to r1, which refuses it; b runs on r2 through the dispatchers. What was
    prepared for r1 is made again for r2, following c's new attempt: the continuation r1
    may hold follows an attempt of c that no runner will be given."""
    state, _ = handed_b()
    old = {s: state.steps[s].ticket for s in "cde"}
    assert state.on_handoff_answer("b", 1, 0, "r1", "refused")  # to the dispatchers
    out = done(state, "b", runner="r2")
    [enq] = of(Enqueue, out)
    assert (enq.ready.step_id, enq.handoff) == ("c", "r2")
    assert [(e.ready.step_id, e.runner) for e in of(Continue, out)] == [
        ("d", "r2"),
        ("e", "r2"),
        ("f", "r2"),
    ]
    assert all(state.steps[s].ticket != old[s] for s in "cde")


def test_a_failure_voids_what_was_prepared_after_it() -> None:
    state, _ = handed_b(retries=1)
    out = done(state, "b", outcome="failed")
    assert of(ScheduleRetry, out) and state.steps["b"].status == "retrying"
    for s in "cde":
        assert (state.steps[s].offered_to, state.steps[s].ticket) == (None, "")
    # A failure for good skips them, as any step downstream.
    state, _ = handed_b()
    done(state, "b", outcome="failed")
    assert [state.steps[s].status for s in "cdefg"] == ["skipped"] * 5


def test_a_continuation_heard_started_before_a_silent_verdict_spends_its_attempt() -> None:
    """Its runner went on (a heartbeat under the prepared ticket) and died before the
    outcome naming it was stored: the command may have run there, so its attempt number is
    spent, and the step runs as attempt 2 once the one before succeeds."""
    state, _ = make(chain(retries=1), policy=CONTINUING)
    started("a", runner="r1")(state)
    state.on_heartbeat("b", 1, "r1", None)  # b, carried by a, started there
    state.on_heartbeat("c", 1, "r1", None)  # not prepared: not a start it can have made
    out = state.on_silent("a", 1, "runner r1 silent for 3 s", T0 + 4)
    b = state.steps["b"]
    assert (b.status, b.attempt, b.offered_to) == ("pending", 1, None)
    assert [(x.attempt, x.runner, x.finished_at) for x in b.attempts] == [
        (1, "r1", from_epoch(T0 + 4))
    ]
    assert "started on runner r1 to follow a" in (b.attempts[0].reason or "")
    assert KillAttempt("r1", "b", 1, b.attempts[0].reason or "") in out
    assert [e.step.id for e in of(PersistStep, out)].count("b") >= 1
    assert state.steps["c"].attempts == []
    # a's retry carries no continuation: b is past its first attempt.
    [enq] = of(Enqueue, out)
    assert (enq.ready.step_id, enq.ready.attempt, enq.ready.then) == ("a", 2, None)
    out = done(state, "a", runner="r2")
    [enq] = of(Enqueue, out)
    assert (enq.ready.step_id, enq.ready.attempt) == ("b", 2)
    # The spent attempt counts as a try: a failure of the second is the step's last.
    out = done(state, "b", runner="r2", outcome="failed")
    assert state.steps["b"].status == "failed" and of(ScheduleRetry, out) == []


def test_a_continuations_events_handled_before_the_outcome_it_follows_are_not_fenced() -> None:
    """Stored after that outcome, but handled before it (a redelivery after a failover):
    neither its started event nor its outcome kills it or what follows it; then the outcome
    naming it takes it as usual. Heard started, it is spent if the one before is voided."""
    state, _ = handed_b()
    out = started("c", runner="r1")(state)
    assert of(KillAttempt, out) == [] and state.steps["c"].status == "pending"
    out = done(state, "c", attempt=1, continued="d")
    assert of(KillAttempt, out) == [] and state.steps["c"].status == "pending"
    out = done(state, "b", continued="c")
    assert state.steps["c"].status == "queued" and of(KillAttempt, out) == []
    # Not prepared (or not under its ticket): fenced as before.
    state, _ = handed_b()
    out = started("f", runner="r1", ticket="")(state)
    assert of(KillAttempt, out) == [KillAttempt("r1", "f", 1, "attempt does not count")]
    # Heard started early, then the one before judged silent: its attempt is spent.
    state, _ = handed_b(retries=1)
    started("c", runner="r1")(state)
    state.on_silent("b", 1, "runner r1 silent for 3 s", T0 + 4)
    assert [a.runner for a in state.steps["c"].attempts] == ["r1"]


def test_a_continuation_not_heard_started_is_voided_without_spending_an_attempt() -> None:
    state, _ = make(chain(retries=1), policy=CONTINUING)
    started("a", runner="r1")(state)
    out = state.on_silent("a", 1, "runner r1 silent for 3 s", T0 + 4)
    assert (state.steps["b"].attempt, state.steps["b"].attempts) == (0, [])
    [enq] = of(Enqueue, out)
    assert enq.ready.then is not None and enq.ready.then.step_id == "b"
    # A heartbeat under a ticket prepared before, heard after it was voided, spends nothing.
    state, _ = make(chain(retries=1), policy=CONTINUING)
    started("a", runner="r1")(state)
    prepared = state.steps["b"].ticket
    state.steps["b"].ticket = "prepared-anew"
    state.on_heartbeat("b", 1, "r1", None)
    state.steps["b"].ticket = prepared
    state.on_silent("a", 1, "runner r1 silent for 3 s", T0 + 4)
    assert state.steps["b"].attempt == 0


def test_a_continuation_that_does_not_count_is_killed_on_its_runner() -> None:
    # The run was cancelled meanwhile.
    state, _ = handed_b()
    # b was handed to r1, which has not said it holds it: the kill goes there too.
    assert KillAttempt("r1", "b", 1, "cancelled") in cancel(state)
    out = done(state, "b", continued="c")
    assert [k.step_id for k in of(KillAttempt, out)] == ["c"]
    assert state.steps["c"].status == "cancelled"
    # The attempt it follows is stale.
    state, _ = handed_b()
    out = done(state, "b", continued="c", attempt=2)
    assert [k.step_id for k in of(KillAttempt, out)] == ["c"]
    assert state.steps["c"].status == "pending"
    # It ran under a ticket that is not the one prepared now (prepared anew since, after
    # a rebuild that lost the first preparation).
    state, _ = handed_b()
    ticket = state.steps["c"].ticket
    state.steps["c"].ticket = "prepared-anew"
    out = done(state, "b", continued="c", continued_ticket=ticket)
    assert [k.step_id for k in of(KillAttempt, out)] == ["c"]
    assert of(Enqueue, out)[0].ready.step_id == "c"  # handed off afresh
    # It names a step that was not prepared for that runner.
    state, _ = handed_b()
    state.steps["c"].offered_to = "r2"
    out = done(state, "b", continued="c")
    assert [k.step_id for k in of(KillAttempt, out)] == ["c"]
    [enq] = of(Enqueue, out)
    assert enq.ready.step_id == "c"


def test_a_success_with_outputs_is_not_continued_and_passes_them_on() -> None:
    """A runner continues only after a success without outputs: the next step's variables
    were made before they were known. Those computed then are not kept either."""
    state, _ = handed_b()
    out = done(state, "b", outputs={"k": "v"}, continued="c")
    assert [k.step_id for k in of(KillAttempt, out)] == ["c"]
    [enq] = of(Enqueue, out)
    assert enq.ready.step_id == "c" and enq.ready.env == {"HEDDLE_OUT_B_K": "v"}
    # And down the chain, once c is continued: d's variables carry b's outputs too.
    out = done(state, "c", continued="d")
    d = state.steps["d"]
    assert d.status == "queued"
    [sent] = [e for e in of(Continue, out) if e.ready.step_id == "g"]
    assert sent.ready.env == {"HEDDLE_OUT_B_K": "v"}


def test_only_a_step_with_one_parent_is_a_continuation() -> None:
    steps = [("a", [], 0), ("b", ["a"], 0), ("x", [], 0), ("c", ["b", "x"], 0)]
    state, _ = make(steps, policy=CONTINUING)
    out = done(state, "a")
    assert of(Enqueue, out)[0].handoff == "r1" and of(Continue, out) == []


def test_without_the_policy_nothing_is_prepared() -> None:
    state, out = handed_b(policy=dataclasses.replace(CONTINUING, continuations=False))
    assert of(Enqueue, out)[0].handoff == "r1" and of(Continue, out) == []
    assert all(state.steps[s].offered_to is None for s in "cdefg")


def test_a_continuation_too_large_for_a_ready_message_is_not_prepared() -> None:
    policy = dataclasses.replace(CONTINUING, max_ready_bytes=600)
    state, _ = make(chain(), policy=policy)
    state.steps["c"].env = {"BIG": "x" * 1000}
    out = done(state, "a")
    assert of(Continue, out) == [] and state.steps["c"].offered_to is None


def test_a_rebuilt_run_waits_for_a_started_continuation_as_for_a_lost_answer() -> None:
    state, _ = handed_b()
    done(state, "b", continued="c")
    records = [step_record_decoder.decode(msgspec.json.encode(s)) for s in state.steps.values()]
    rebuilt = RunState(state.run, records, CONTINUING)
    effects = rebuilt.resume(T0 + 3)
    assert AwaitHandoff("c", 1, 0, "r1") in effects
    assert of(Enqueue, effects) == []
    # The prepared steps after it stay as they are: the runner may hold them.
    assert [rebuilt.steps[s].offered_to for s in "def"] == ["r1"] * 3


# ---- a step placed by a dispatcher carries its continuation in its ready message ----


def test_a_step_for_the_dispatchers_carries_its_chain_successor_for_any_runner() -> None:
    state, effects = make(chain(), policy=CONTINUING)
    [enq] = of(Enqueue, effects)
    a, b = state.steps["a"], state.steps["b"]
    then = enq.ready.then
    assert enq.handoff is None and then is not None
    assert (then.step_id, then.attempt, then.ticket) == ("b", 1, b.ticket)
    assert (then.after, then.after_attempt, then.after_ticket) == ("a", 1, a.ticket)
    assert then.then is None and b.ticket and b.ticket != a.ticket
    # Prepared, still pending, for whichever runner takes "a"; its record goes first.
    assert (b.status, b.attempt, b.offered_to) == ("pending", 0, ANY_RUNNER)
    writes = [i for i, e in enumerate(effects) if isinstance(e, PersistStep) and e.step is b]
    assert writes[0] < effects.index(enq)
    assert of(Continue, effects) == []  # no runner to send it to
    # Only one: the rest of the chain is prepared once a runner is known.
    assert state.steps["c"].offered_to is None


def test_a_carried_continuation_started_by_any_runner_is_that_runners() -> None:
    state, _ = make(chain(), policy=CONTINUING)
    out = done(state, "a", runner="r7", continued="b")
    b = state.steps["b"]
    assert (b.status, b.attempt, b.offered_to) == ("queued", 1, "r7")
    assert of(AwaitHandoff, out) == [AwaitHandoff("b", 1, 0, "r7", continued=True)]
    assert of(Enqueue, out) == [] and of(KillAttempt, out) == []
    # From there the chain goes on as any handed-off step's: prepared for r7.
    assert [(e.ready.step_id, e.runner) for e in of(Continue, out)] == [
        ("c", "r7"),
        ("d", "r7"),
        ("e", "r7"),
    ]


def test_a_retry_carries_its_continuation_again_after_that_attempt() -> None:
    state, _ = make(chain(retries=1), policy=CONTINUING)
    first = state.steps["b"].ticket
    out = done(state, "a", outcome="failed")
    assert state.steps["b"].offered_to is None and state.steps["b"].ticket == ""
    [retry] = of(ScheduleRetry, out)
    [enq] = of(Enqueue, state.on_retry_due("a", retry.attempt, T0 + 5))
    then = enq.ready.then
    assert then is not None and (then.after_attempt, then.after_ticket) == (
        2,
        state.steps["a"].ticket,
    )
    assert then.ticket == state.steps["b"].ticket != first
    # An outcome naming the continuation with its first ticket does not count.
    out = done(state, "a", attempt=2, continued="b", continued_ticket=first)
    assert of(KillAttempt, out) == [
        KillAttempt("r1", "b", 1, "continuation not taken: it was not prepared")
    ]


def test_a_step_whose_message_would_be_too_large_with_its_continuation_carries_none() -> None:
    policy = dataclasses.replace(CONTINUING, max_ready_bytes=1200)
    state, effects = make([("a", [], 1), ("b", ["a"], 0)], policy=policy)
    assert of(Enqueue, effects)[0].ready.then is not None
    [retry] = of(ScheduleRetry, done(state, "a", outcome="failed"))
    # Each fits in a ready message alone, not both in one.
    state.steps["a"].env = {"BIG": "x" * 500}
    state.steps["b"].env = {"BIG": "x" * 600}
    [enq] = of(Enqueue, state.on_retry_due("a", retry.attempt, T0 + 5))
    assert enq.ready.then is None
    assert (state.steps["b"].offered_to, state.steps["b"].ticket) == (None, "")


def test_a_step_with_two_parents_is_not_carried() -> None:
    steps = [("a", [], 0), ("x", [], 0), ("b", ["a", "x"], 0)]
    _, effects = make(steps, policy=CONTINUING)
    assert [e.ready.then for e in of(Enqueue, effects)] == [None, None]
