"""Deliveries a run's end should have made and did not: an orchestrator that died between
storing a run's end and storing its deliveries (the two go out pipelined, in one pass) left
the run ended with none. The retention sweep, which reads every run record anyway, creates
them for the runs that ended lately (``notify_plan.owed``); a KV create, so a delivery that
exists is left as it is (docs/notifications.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from heddle.shared.broker.nats_types import KeyWrongLastSequenceError
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Notification, encode

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import KeyValue


async def create_missing(kv: KeyValue, notifications: list[Notification]) -> list[str]:
    """Each created unless it exists; the keys created."""
    made = []
    for n in notifications:
        key = names.notification_key(n.run_id, n.index)
        try:
            await kv.create(key, encode(n))
        except KeyWrongLastSequenceError:
            continue
        made.append(key)
    return made
