"""A runner's "accepted" leaves with the step's first report, in the same write: the
outcome of a short step, the announcement of a longer one, and never later than a quarter
of the dispatcher's wait (docs/latency.md, "Answering with the first report").

Each test plays the dispatcher against one real runner process: it sends the assignment
itself and watches the answer, the events and a file the command writes as it ends.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.offers import assign, assign_answered_by_outcome, one_runner
from tests.support.stack import StackFactory


async def test_a_short_steps_answer_leaves_with_its_outcome(
    stack: StackFactory, tmp_path: Path
) -> None:
    nc = await one_runner(stack, report_delay="5", assign_timeout="30")
    ended = tmp_path / "ended"
    accepted, events = await assign(nc, "short", f"sleep 0.3; touch {ended}")
    assert accepted
    assert ended.exists()  # answered once the command had ended, not when it started
    finished = await asyncio.wait_for(events.get(), 5)
    assert finished.outcome == "succeeded" and finished.step_id == "short"
    await nc.close()


async def test_a_longer_steps_answer_leaves_with_its_start(
    stack: StackFactory, tmp_path: Path
) -> None:
    nc = await one_runner(stack, report_delay="0.2", assign_timeout="30")
    ended = tmp_path / "ended"
    accepted, events = await assign(nc, "long", f"sleep 3; touch {ended}")
    assert accepted and not ended.exists()
    started = await asyncio.wait_for(events.get(), 5)  # in the same write as the answer
    assert type(started).__name__ == "StepStarted" and not ended.exists()
    finished = await asyncio.wait_for(events.get(), 10)
    assert finished.outcome == "succeeded" and ended.exists()
    await nc.close()


async def test_the_answer_does_not_wait_for_a_long_report_delay(
    stack: StackFactory, tmp_path: Path
) -> None:
    """A report delay longer than the dispatcher would wait: the answer goes at a quarter of
    HEDDLE_ASSIGN_TIMEOUT, alone, while the command runs and before any report."""
    nc = await one_runner(stack, report_delay="30", assign_timeout="2")
    ended = tmp_path / "ended"
    accepted, events = await assign(nc, "slow", f"sleep 3; touch {ended}")
    assert accepted and not ended.exists() and events.empty()
    finished = await asyncio.wait_for(events.get(), 10)
    assert finished.outcome == "succeeded" and ended.exists()
    await nc.close()


async def test_an_offer_the_outcome_answers_gets_the_outcome_alone(
    stack: StackFactory, tmp_path: Path
) -> None:
    """A dispatcher's offer (``Heddle-Answer: outcome``): a short step's runner sends its
    outcome, which carries its count of assignments, and no "accepted" (docs/latency.md,
    "Answered by the outcome")."""
    nc = await one_runner(stack, report_delay="5", assign_timeout="30")
    replies, events = await assign_answered_by_outcome(nc, "short", "true")
    finished = await asyncio.wait_for(events.get(), 5)
    assert finished.outcome == "succeeded" and finished.jobs == 1
    # A second one counts on; neither is answered but by its outcome.
    replies2, events2 = await assign_answered_by_outcome(nc, "again", "true")
    assert (await asyncio.wait_for(events2.get(), 5)).jobs == 2
    await nc.flush()
    await asyncio.sleep(0.3)  # a reply would have come in the same write as the outcome
    assert replies.empty() and replies2.empty()
    await nc.close()


async def test_a_longer_step_answers_such_an_offer_with_its_start(
    stack: StackFactory, tmp_path: Path
) -> None:
    """The outcome answers only when it is the first report: a step still running at the
    report delay answers "accepted" with its start, as for any offer."""
    nc = await one_runner(stack, report_delay="0.2", assign_timeout="30")
    replies, events = await assign_answered_by_outcome(nc, "long", "sleep 2")
    reply = await asyncio.wait_for(replies.get(), 5)
    assert reply.accepted and reply.jobs == 1
    started = await asyncio.wait_for(events.get(), 5)
    assert type(started).__name__ == "StepStarted"
    finished = await asyncio.wait_for(events.get(), 10)
    assert finished.outcome == "succeeded" and replies.empty()
    await nc.close()
