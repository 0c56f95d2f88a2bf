"""services/runner_agent/continuations.py: which continuation a runner's attempt takes.
Each follows one attempt as it was given, its ticket included. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
from heddle.services.runner_agent.continuations import AttemptKey, Continuations
from heddle.shared.wire.contracts import StepReady


def ready(step: str, ticket: str, after: str = "", after_ticket: str = "") -> StepReady:
    return StepReady(
        run_id="r",
        step_id=step,
        attempt=1,
        command="true",
        timeout_seconds=30,
        ready_at="",
        ticket=ticket,
        after=after,
        after_attempt=1 if after else 0,
        after_ticket=after_ticket,
    )


@dataclass
class Running:
    ready: StepReady
    then: StepReady | None = field(default=None)

    @property
    def key(self) -> AttemptKey:
        return (self.ready.run_id, self.ready.step_id, self.ready.attempt)


def test_the_attempt_running_takes_the_continuation_that_follows_it_as_given() -> None:
    held, a = Continuations(), Running(ready("a", "ta"))
    held.hold(ready("b", "tb", after="a", after_ticket="t-old"), a)
    assert a.then is None  # made for the same attempt under another ticket: dropped
    assert held.of(a) is None
    then = ready("b", "tb", after="a", after_ticket="ta")
    held.hold(then, a)
    assert a.then == then


def test_one_that_came_first_waits_for_the_offer_of_its_attempt() -> None:
    held = Continuations()
    then = ready("b", "tb", after="a", after_ticket="ta")
    held.hold(then, Running(ready("x", "tx")))  # another attempt runs now
    assert held.of(Running(ready("a", "ta-new"))) is None  # a afresh: not this one's
    held.hold(then, None)
    assert held.of(Running(ready("a", "ta"))) == then
    assert held.of(Running(ready("a", "ta"))) is None  # taken once


def test_those_of_attempts_never_offered_are_forgotten_oldest_first() -> None:
    held = Continuations(kept=3)
    for n in range(5):
        held.hold(ready(f"c{n}", "t", after=f"p{n}", after_ticket="tp"), None)
    kept = [n for n in range(5) if held.of(Running(ready(f"p{n}", "tp")))]
    assert kept == [2, 3, 4]


def test_a_continuation_given_with_the_offer_is_taken_if_it_follows_that_attempt() -> None:
    held = Continuations()
    carried = ready("b", "tb", after="a", after_ticket="ta")
    a = Running(msgspec.structs.replace(ready("a", "ta"), then=carried))
    assert held.of(a) == carried
    # Under another ticket, after another step, or itself carrying one: not taken.
    for then in (
        ready("b", "tb", after="a", after_ticket="t-old"),
        ready("b", "tb", after="x", after_ticket="ta"),
        msgspec.structs.replace(carried, then=ready("c", "tc", after="b", after_ticket="tb")),
    ):
        assert held.of(Running(msgspec.structs.replace(ready("a", "ta"), then=then))) is None
