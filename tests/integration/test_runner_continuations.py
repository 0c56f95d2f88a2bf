"""A runner's continuations (docs/latency.md, "Continuing a chain"): offered a step and
the one after it, it starts the second the moment the first succeeds without outputs, says
so in the first one's outcome, and reports the second only after it.

First which continuation an attempt takes (services/runner_agent/continuations.py, called
directly): each follows one attempt as it was given, its ticket included. Then a real runner
process and a real nats-server; the offers are sent as the orchestrator sends them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from heddle.services.runner_agent.continuations import AttemptKey, Continuations
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, CancelAttempt, StepFinished, StepReady, encode
from heddle.shared.wire.timefmt import from_epoch

from tests.support.stack import StackFactory, until

# ---- which continuation an attempt takes, without I/O --------------------------------------


def given(step: str, ticket: str, after: str = "", after_ticket: str = "") -> StepReady:
    """A ready message as a runner holds it: its own ticket, and the attempt it follows."""
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
    held, a = Continuations(), Running(given("a", "ta"))
    held.hold(given("b", "tb", after="a", after_ticket="t-old"), a)
    assert a.then is None  # made for the same attempt under another ticket: dropped
    assert held.of(a) is None
    then = given("b", "tb", after="a", after_ticket="ta")
    held.hold(then, a)
    assert a.then == then


def test_one_that_came_first_waits_for_the_offer_of_its_attempt() -> None:
    held = Continuations()
    then = given("b", "tb", after="a", after_ticket="ta")
    held.hold(then, Running(given("x", "tx")))  # another attempt runs now
    assert held.of(Running(given("a", "ta-new"))) is None  # a afresh: not this one's
    held.hold(then, None)
    assert held.of(Running(given("a", "ta"))) == then
    assert held.of(Running(given("a", "ta"))) is None  # taken once


def test_those_of_attempts_never_offered_are_forgotten_oldest_first() -> None:
    held = Continuations(kept=3)
    for n in range(5):
        held.hold(given(f"c{n}", "t", after=f"p{n}", after_ticket="tp"), None)
    kept = [n for n in range(5) if held.of(Running(given(f"p{n}", "tp")))]
    assert kept == [2, 3, 4]


def test_a_continuation_given_with_the_offer_is_taken_if_it_follows_that_attempt() -> None:
    held = Continuations()
    carried = given("b", "tb", after="a", after_ticket="ta")
    a = Running(msgspec.structs.replace(given("a", "ta"), then=carried))
    assert held.of(a) == carried
    # Under another ticket, after another step, or itself carrying one: not taken.
    for then in (
        given("b", "tb", after="a", after_ticket="t-old"),
        given("b", "tb", after="x", after_ticket="ta"),
        msgspec.structs.replace(carried, then=given("c", "tc", after="b", after_ticket="tb")),
    ):
        assert held.of(Running(msgspec.structs.replace(given("a", "ta"), then=then))) is None


# ---- a real runner ------------------------------------------------------------------------

RUNNER = "runner-0"


def ready(run: str, step: str, command: str, after: str = "", after_ticket: str = "") -> StepReady:
    return StepReady(
        run_id=run,
        step_id=step,
        attempt=1,
        command=command,
        timeout_seconds=30,
        ready_at=from_epoch(time.time()),
        ticket=f"ticket-{step}",
        after=after,
        after_attempt=1 if after else 0,
        after_ticket=after_ticket or (f"ticket-{after}" if after else ""),
    )


class Outcomes:
    """The runner's finished events of one run, in the order it published them."""

    def __init__(self) -> None:
        self.got: list[StepFinished] = []

    async def on(self, msg) -> None:  # type: ignore[no-untyped-def]
        self.got.append(msgspec.json.decode(msg.data, type=StepFinished))

    def of(self, step: str) -> StepFinished:
        return next(f for f in self.got if f.step_id == step)


async def offered(nc, first: StepReady, then: StepReady, *, then_first: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Offer ``first`` and send ``then`` before it, or while it runs (``first`` must run for
    a moment: a short step's answer comes with its outcome)."""
    subject = names.runner_assign(RUNNER)
    if then_first:  # the orchestrator's two sends may arrive in either order
        await nc.publish(subject, encode(then))
    for _ in range(20):
        asking = asyncio.create_task(nc.request(subject, encode(first), timeout=5))
        if not then_first:
            await asyncio.sleep(0.05)
            await nc.publish(subject, encode(then))
        answer = msgspec.json.decode((await asking).data, type=AssignReply)
        # A runner just started on a busy machine may have stood still (shared/runtime/stalls.py).
        if answer.accepted or not (answer.reason or "").startswith("stale"):
            break
        await asyncio.sleep(0.2)
    assert answer.accepted, answer.reason


@pytest.fixture(params=["0.1", "0"], ids=["report-delay", "every-start-reported"])
async def runner(stack: StackFactory, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A runner as by default, and one that reports every start at once (its continuation
    announced only once the outcome before it is stored)."""
    s = await stack(
        runners=1,
        services=("orchestrator",),
        wait=False,
        HEDDLE_STARTED_REPORT_DELAY=request.param,
    )
    await until(lambda: '"runner ready"' in s.logs(RUNNER), 20, "the runner is ready")
    nc = await s.connect()
    outcomes = Outcomes()
    await nc.subscribe("heddle.evt.*.*.finished.*", cb=outcomes.on)
    yield s, nc, outcomes
    await nc.close()


@pytest.mark.parametrize("then_first", [False, True])
async def test_the_continuation_runs_at_the_success_and_is_reported_after_it(
    runner, tmp_path: Path, then_first: bool
) -> None:
    s, nc, outcomes = runner
    ran = tmp_path / "ran"
    await offered(
        nc,
        ready("r1", "a", f"sleep 0.3; echo a >> {ran}"),
        ready("r1", "b", f"echo b >> {ran}", after="a"),
        then_first=then_first,
    )
    await until(lambda: len(outcomes.got) == 2, 10, "both outcomes")
    assert ran.read_text() == "a\nb\n"
    assert [(f.step_id, f.outcome, f.continued, f.continued_ticket) for f in outcomes.got] == [
        ("a", "succeeded", "b", "ticket-b"),
        ("b", "succeeded", "", ""),
    ]
    assert outcomes.of("b").ticket == "ticket-b"
    # a ended before b started: b is queued at a's end, so its wait is never negative.
    assert outcomes.of("a").finished_at <= (outcomes.of("b").started_at or "")
    assert '"msg":"continued"' in s.logs(RUNNER)


@pytest.mark.parametrize("then_first", [False, True])
async def test_a_continuation_for_the_attempt_under_another_ticket_is_not_run(
    runner, tmp_path: Path, then_first: bool
) -> None:
    """Made for an offer of the same attempt this runner refused (it was busy), and the
    attempt offered again afresh: it follows that offer, not this one."""
    _, nc, outcomes = runner
    ran = tmp_path / "ran"
    stale = ready("r4", "b", f"echo b >> {ran}", after="a", after_ticket="an-older-ticket")
    await offered(nc, ready("r4", "a", "sleep 0.3"), stale, then_first=then_first)
    await until(lambda: len(outcomes.got) == 1, 10, "a's outcome")
    await asyncio.sleep(0.3)
    assert outcomes.of("a").continued == "" and not ran.exists()


@pytest.mark.parametrize(
    ("command", "why"),
    [("exit 3", "a failure"), ('echo k=v >> "$HEDDLE_OUTPUTS"', "outputs")],
)
async def test_no_continuation_after_a_failure_or_a_success_with_outputs(
    runner, tmp_path: Path, command: str, why: str
) -> None:
    _, nc, outcomes = runner
    ran = tmp_path / "ran"
    first = ready("r2", "a", f"sleep 0.3; {command}")
    await offered(nc, first, ready("r2", "b", f"echo b >> {ran}", after="a"))
    await until(lambda: len(outcomes.got) == 1, 10, "a's outcome")
    assert outcomes.of("a").continued == "", why
    await asyncio.sleep(0.5)
    assert not ran.exists() and len(outcomes.got) == 1
    # The runner is free for the next offer.
    reply = await nc.request(
        names.runner_assign(RUNNER), encode(ready("r2", "c", "true")), timeout=5
    )
    assert msgspec.json.decode(reply.data, type=AssignReply).accepted


async def test_the_kill_of_the_attempt_it_follows_kills_the_continuation(
    runner, tmp_path: Path
) -> None:
    """The orchestrator fences an attempt it does not count by killing it; its runner may
    have gone on to the continuation meanwhile, which dies with it."""
    _, nc, outcomes = runner
    started = tmp_path / "started"
    await offered(
        nc,
        ready("r3", "a", "sleep 0.3"),
        ready("r3", "b", f"touch {started}; sleep 30", after="a"),
    )
    await until(started.exists, 10, "the continuation runs")
    # As the orchestrator sends it, with that attempt's ticket; one with another ticket,
    # sent first, is not the orchestrator's and kills nothing.
    for ticket, reason in (("ticket-b", "forged"), ("ticket-a", "cancelled")):
        kill = CancelAttempt(run_id="r3", step_id="a", attempt=1, reason=reason, ticket=ticket)
        await nc.publish(names.runner_cancel(RUNNER), encode(kill))
    await until(lambda: len(outcomes.got) == 2, 10, "the continuation's outcome")
    assert (outcomes.of("b").outcome, outcomes.of("b").reason) == ("cancelled", "cancelled")


async def test_a_continuation_given_with_its_offer_runs_at_the_success(
    runner, tmp_path: Path
) -> None:
    """As a dispatcher offers a step the orchestrator gave its continuation along (in the
    ready message's ``then``): one request, a short step included."""
    _, nc, outcomes = runner
    ran = tmp_path / "ran"
    first = msgspec.structs.replace(
        ready("r3", "a", f"echo a >> {ran}"), then=ready("r3", "b", f"echo b >> {ran}", after="a")
    )
    for _ in range(20):
        reply = await nc.request(names.runner_assign(RUNNER), encode(first), timeout=5)
        answer = msgspec.json.decode(reply.data, type=AssignReply)
        if answer.accepted or not (answer.reason or "").startswith("stale"):
            break
        await asyncio.sleep(0.2)
    assert answer.accepted, answer.reason
    await until(lambda: len(outcomes.got) == 2, 10, "both outcomes")
    assert ran.read_text() == "a\nb\n"
    assert [(f.step_id, f.continued, f.continued_ticket) for f in outcomes.got] == [
        ("a", "b", "ticket-b"),
        ("b", "", ""),
    ]
