"""A new run's step records stored in bulk: a 10,000-step run is not 10,000 acknowledged
writes (docs/performance.md, "Big workflows")."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from heddle.services.orchestrator.decisions import Effect, PersistStep
from heddle.shared.broker.kv_reads import count_keys
from heddle.shared.wire import names
from heddle.shared.wire.contracts import encode

if TYPE_CHECKING:
    from heddle.shared.broker.acked import AckedPublisher
    from heddle.shared.broker.nats_types import Client, JetStreamContext

log = logging.getLogger("heddle.orchestrator")
ACK_TIMEOUT = 10.0  # seconds for an orchestrator's write to be acknowledged
CHECKPOINT = 256  # records between acknowledged writes


async def write_new_steps(
    nc: Client, js: JetStreamContext, acked: AckedPublisher, run_id: str, effects: list[Effect]
) -> list[int]:
    """A new run's pending step records, in bulk: core publishes with an acknowledged
    checkpoint every ``CHECKPOINT`` records (the next waits for the previous), then one
    count of the run's step keys on the server. Far cheaper than an acknowledgement per
    record for a 10,000-step run; the count catches a record the server dropped, and
    then every record is written again, acknowledged. Returns the effects written."""
    new = [
        (i, e.step)
        for i, e in enumerate(effects)
        if isinstance(e, PersistStep) and e.previous == "new" and e.step.status == "pending"
    ]
    if len(new) < CHECKPOINT:
        return []  # small runs: the ordinary pipelined path is as fast
    checkpoint: asyncio.Future | None = None
    for n, (_, step) in enumerate(new, 1):
        subject = names.kv_subject(names.RUNS_BUCKET, names.step_key(run_id, step.id))
        if n % CHECKPOINT == 0 or n == len(new):
            ack = await acked.publish(subject, encode(step))
            if checkpoint is not None:
                await asyncio.wait_for(checkpoint, ACK_TIMEOUT)
            checkpoint = ack
        else:
            await nc.publish(subject, encode(step))
    assert checkpoint is not None
    await asyncio.wait_for(checkpoint, ACK_TIMEOUT)
    stored = await count_keys(js, names.RUNS_BUCKET, names.steps_of_run(run_id))
    if stored < len(new):
        log.warning(
            "run %s: %d of %d step records stored; writing them again", run_id, stored, len(new)
        )
        futures = [
            await acked.publish(
                names.kv_subject(names.RUNS_BUCKET, names.step_key(run_id, step.id)),
                encode(step),
            )
            for _, step in new
        ]
        await asyncio.wait_for(asyncio.gather(*futures), ACK_TIMEOUT)
    return [i for i, _ in new]
