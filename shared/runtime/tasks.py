"""Stopping a service's background tasks, reliably.

Every service stops its loops by cancelling their tasks and waiting for them. On Python 3.11
a cancellation can be lost: ``asyncio.wait_for`` (used by nats-py for its timeouts, and by
Heddle) returns the awaited result instead of raising ``CancelledError`` when the result and
the cancellation arrive in the same turn of the event loop (CPython gh-86296, fixed in
3.12). The loop then goes on to its next wait, which for a KV watch can be an hour (a
dispatcher stopping with its runners gets their registry deletes as it is cancelled), and
the stop hangs until the supervisor's SIGKILL. So a task still running a moment after its
cancellation is cancelled again.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("heddle")

PATIENCE = 0.5  # seconds a cancelled task gets before it is cancelled again
ROUNDS = 20


async def cancel_and_wait(
    *tasks: asyncio.Task | None, patience: float = PATIENCE, rounds: int = ROUNDS
) -> None:
    """Cancel the tasks (``None`` and finished ones are skipped) and wait until they end,
    cancelling again any that are still running after ``patience`` seconds. Their results
    and exceptions are not raised: they are being stopped."""
    pending = {t for t in tasks if t is not None and not t.done()}
    for _ in range(rounds):
        if not pending:
            return
        for task in pending:
            task.cancel()
        done, pending = await asyncio.wait(pending, timeout=patience)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved, so asyncio does not report it at exit
    if pending:
        log.warning("tasks still running after %d cancellations: %s", rounds, pending)
