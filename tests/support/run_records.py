"""What a run actor stored in heddle-runs, read back on a real nats-server, and the runner's
events a test posts to that actor (a run "gc", from T0)."""

from __future__ import annotations

import json

from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished
from heddle.shared.wire.timefmt import from_epoch
from nats.aio.client import Client

T0 = 1_800_000_000.0


async def writes(nc: Client) -> int:
    """How many records heddle-runs has stored so far (its last sequence)."""
    info = await nc.jetstream().stream_info(f"KV_{names.RUNS_BUCKET}")
    return info.state.last_seq


async def record(nc: Client, key: str) -> dict:
    kv = await nc.jetstream().key_value(names.RUNS_BUCKET)
    return json.loads((await kv.get(key)).value)


def finished(step: str, runner: str = "r1") -> StepFinished:
    return StepFinished(
        run_id="gc",
        step_id=step,
        attempt=1,
        runner=runner,
        outcome="succeeded",
        finished_at=from_epoch(T0 + 1),
        exit_code=0,
    )
