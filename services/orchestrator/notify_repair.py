"""Deliveries a run's end should have made and did not: an orchestrator that died between
storing a run's end and storing its deliveries (the two go out pipelined, in one pass) left
the run ended with none. The retention sweep, which reads every run record anyway, creates
them for the runs that ended lately; a KV create, so a delivery that exists is left as it is
(docs/notifications.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from heddle.shared.broker.nats_types import KeyWrongLastSequenceError
from heddle.shared.core.notify_plan import due_notifications
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Notification, RunRecord, encode
from heddle.shared.wire.timefmt import epoch_of

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import KeyValue


def owed(
    runs: Iterable[RunRecord], now: float, within: float, is_live: Callable[[str], bool]
) -> list[Notification]:
    """The deliveries of the runs that ended within ``within`` seconds of ``now`` and are
    no actor's any more (a live one stores its own)."""
    out: list[Notification] = []
    for run in runs:
        if not run.notify or run.finished_at is None or is_live(run.run_id):
            continue
        if epoch_of(run.finished_at, 0.0) >= now - within:
            out.extend(due_notifications(run))
    return out


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
