"""A runner's "accepted" leaves with the step's first report, in the same write: the
outcome of a short step, the announcement of a longer one, and never later than a quarter
of the dispatcher's wait (docs/latency.md, "Answering with the first report").

Each test plays the dispatcher against one real runner process: it sends the assignment
itself and watches the answer, the events and a file the command writes as it ends.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepReady, assign_reply_decoder, encode, event_decoder
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.conftest import StackFactory
from tests.stack import Stack


async def one_runner(stack: StackFactory, report_delay: str, assign_timeout: str) -> Client:
    """NATS and one runner, no other service; a connection of our own, once the runner
    answers on its subject."""
    s = await stack(
        runners=1,
        services=(),
        wait=False,
        HEDDLE_STARTED_REPORT_DELAY=report_delay,
        HEDDLE_ASSIGN_TIMEOUT=assign_timeout,
    )
    return await runner_listening(s)


async def runner_listening(s: Stack, runner: str = "runner-0") -> Client:
    nc = await s.connect()
    await ensure_resources(nc, Settings())  # a runner waits for what the services create
    deadline = time.monotonic() + 20
    while True:
        try:
            await nc.request(names.runner_assign(runner), b"not an assignment", timeout=0.5)
            return nc
        except Exception:
            assert time.monotonic() < deadline, "runner never listened"
            await asyncio.sleep(0.1)


async def assign(nc: Client, step_id: str, command: str) -> tuple[bool, asyncio.Queue]:
    """Send one assignment; returns once the runner answered, with a queue of the step's
    events (subscribed before the assignment went out)."""
    events: asyncio.Queue = asyncio.Queue()

    async def on_event(msg: Msg) -> None:
        events.put_nowait(event_decoder.decode(msg.data))

    await nc.subscribe(names.evt("r1", step_id, "*", "runner-0"), cb=on_event)
    ready = StepReady(
        run_id="r1",
        step_id=step_id,
        attempt=1,
        command=command,
        timeout_seconds=60,
        ready_at="2026-01-01T00:00:00.000Z",
    )
    reply = await nc.request(names.runner_assign("runner-0"), encode(ready), timeout=10)
    return assign_reply_decoder.decode(reply.data).accepted, events


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
