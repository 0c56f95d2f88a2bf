"""The timers the server's message scheduler holds for a run (docs/architecture.md): they
survive an orchestrator restart and fire once; one pending schedule per subject, so one sent
again after a restart replaces it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from heddle.shared.wire import names
from heddle.shared.wire.contracts import DeadlineDue, RetryDue, encode
from heddle.shared.wire.timefmt import from_epoch

if TYPE_CHECKING:
    from heddle.shared.broker.acked import AckedPublisher


async def retry_due(
    acked: AckedPublisher, run_id: str, step_id: str, attempt: int, at: float
) -> asyncio.Future:
    """A step's backoff (or a gate's timeout) over at ``at``: RetryDue for the attempt."""
    return await acked.publish(
        names.sched_timer(run_id, step_id),
        encode(RetryDue(run_id=run_id, step_id=step_id, attempt=attempt)),
        headers={
            "Nats-Schedule": f"@at {from_epoch(at)}",
            "Nats-Schedule-Target": names.cmd_timer(run_id),
        },
    )


async def deadline_due(acked: AckedPublisher, run_id: str, deadline_at: str) -> asyncio.Future:
    """The run's deadline, on a subject of its own: no step's retry timer replaces it."""
    return await acked.publish(
        names.sched_deadline(run_id),
        encode(DeadlineDue(run_id=run_id, deadline_at=deadline_at)),
        headers={
            "Nats-Schedule": f"@at {deadline_at}",
            "Nats-Schedule-Target": names.cmd_deadline(run_id),
        },
    )
