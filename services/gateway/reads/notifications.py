"""A run's notify targets and their deliveries, as the run document shows them
(docs/notifications.md): read from heddle-notifications only for a run that has targets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from heddle.shared.api.answers import NotificationDoc, NotifyAttemptDoc
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Notification, RunRecord, notification_decoder

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket


async def notification_docs(kv: Bucket, run: RunRecord) -> list[NotificationDoc]:
    if not run.notify:
        return []
    found = await read_current(kv, names.notifications_of_run(run.run_id))
    records = [notification_decoder.decode(e.value) for e in found]
    return shown(run, {n.index: n for n in records})


def shown(run: RunRecord, records: dict[int, Notification]) -> list[NotificationDoc]:
    """Each target with its delivery's record, by index (none: not made)."""
    out = []
    for i, target in enumerate(run.notify):
        n = records.get(i)
        attempts = [] if n is None else n.attempts
        out.append(
            NotificationDoc(
                index=i,
                url=target.url,
                on=list(target.on),
                state=None if n is None else n.state,
                attempts=[
                    NotifyAttemptDoc(at=a.at, status=a.status, error=a.error) for a in attempts
                ],
            )
        )
    return out
