"""An attempt's outcome, published until it lands: an outcome is never lost to an outage.

Its own module: the one report every attempt sends, whatever else it did, retried apart from
the command it tells of (attempt.py). The dispatcher's next assignment follows it, so the
runner is free before it is sent; its heartbeats go on until it is stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from heddle.shared.runtime.service import event
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished, encode

if TYPE_CHECKING:
    from heddle.services.runner_agent.attempt_context import AttemptContext

log = logging.getLogger("heddle.runner")
REPORT_ACK_TIMEOUT = 5.0  # seconds at most before the outcome is sent again (deduplicated)


def _ack_wait(ctx: AttemptContext) -> float:
    """How long an outcome waits for its acknowledgement before it is sent again: well
    within the silence limit, so a publish lost with a crashed broker is re-sent soon."""
    return min(REPORT_ACK_TIMEOUT, max(0.5, ctx.settings.silence_limit / 4))


async def report(ctx: AttemptContext, finished: StepFinished) -> None:
    """Publish the outcome until it lands."""
    msg_id = names.event_msg_id(
        "finished", finished.run_id, finished.step_id, finished.attempt, finished.runner
    )
    delay = 0.2
    t0 = time.monotonic()
    payload = encode(finished)
    while True:
        try:
            ack = await ctx.acked.publish(
                names.evt(finished.run_id, finished.step_id, "finished", finished.runner),
                payload,
                headers={"Nats-Msg-Id": msg_id},
            )
            await asyncio.wait_for(ack, _ack_wait(ctx))
            break
        except Exception as exc:  # never given up: any failure, known or not, is retried
            log.warning("reporting %s failed (%s); retrying", msg_id, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
    event(
        log,
        "finished",
        runner=ctx.runner,
        run=finished.run_id,
        step=finished.step_id,
        attempt=finished.attempt,
        outcome=finished.outcome,
        exit_code=finished.exit_code,
        ms=round((time.monotonic() - t0) * 1000, 1),
    )


def summary(ev: StepFinished) -> str:
    """The log's last note of an attempt."""
    if ev.outcome == "succeeded":
        return "succeeded"
    return f"{ev.outcome.replace('_', ' ')}: {ev.reason}"
