"""The records of a run's end's deliveries (``CreateNotifications``), written in the pass
that stores the run's end: each a KV create, so a pass made again, or the same end decided
again after a redelivered message, never resets a delivery a gateway has moved on."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from heddle.services.orchestrator.decisions import CreateNotifications
from heddle.shared.broker.nats_types import KeyWrongLastSequenceError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import encode

if TYPE_CHECKING:
    from heddle.shared.broker.acked import AckedPublisher

CREATE = {"Nats-Expected-Last-Subject-Sequence": "0"}


async def create_notifications(
    acked: AckedPublisher, eff: CreateNotifications
) -> list[asyncio.Future[bytes | None]]:
    """Every record sent; each future is done once it is stored, or found stored already (a
    create refused for an existing key), and fails as any other write of the pass does."""
    futures: list[asyncio.Future[bytes | None]] = []
    for n in eff.records:
        key = names.notification_key(n.run_id, n.index)
        subject = names.kv_subject(names.NOTIFICATIONS_BUCKET, key)
        stored = await acked.publish(subject, encode(n), headers=CREATE)
        futures.append(asyncio.ensure_future(_stored_or_existing(stored)))
    return futures


async def _stored_or_existing(stored: asyncio.Future[bytes]) -> bytes | None:
    try:
        return await stored
    except KeyWrongLastSequenceError:
        return None
