"""Live values of a few KV keys, by a core subscription on the bucket's subjects.

A KV watch is a consumer on the server, and an ephemeral push consumer outlives its client's
unsubscribe for its inactivity threshold: a gateway following hundreds of runs at once piled
them up until the server refused more ("maximum consumers limit reached"). A core
subscription costs the server a subject match and nothing after it is closed. What it does
not give is a revision: a reader takes its snapshot after subscribing and orders what the
two deliver by the records' own progress (services/gateway/reads/progress.py). A publish is seen
as the server receives it, also one the stream then refuses (a stale owner's conditional
write), so a reader's last word is always a stored read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from heddle.shared.broker.buckets import Bucket

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

DELETES = ("DEL", "PURGE")


class KeyChanges:
    """The values put to the keys of ``bucket`` that ``patterns`` match (KV wildcards
    allowed), each handed to ``on_put(key, value)`` as it arrives, until ``stop``."""

    def __init__(
        self, bucket: Bucket, patterns: Iterable[str], on_put: Callable[[str, bytes], None]
    ) -> None:
        self._bucket = bucket
        self._patterns = tuple(patterns)
        self._on_put = on_put
        self._subs: list[Subscription] = []

    async def start(self) -> KeyChanges:
        for pattern in self._patterns:
            self._subs.append(
                await self._bucket.nc.subscribe(self._bucket.prefix + pattern, cb=self._put)
            )
        # Subscribed once the server has the interest: a snapshot read after this misses
        # nothing that a later put changes.
        await self._bucket.nc.flush()
        return self

    async def _put(self, msg: Msg) -> None:
        if not msg.data or (msg.headers or {}).get("KV-Operation") in DELETES:
            return
        self._on_put(msg.subject[len(self._bucket.prefix) :], msg.data)

    async def stop(self) -> None:
        subs, self._subs = self._subs, []
        for sub in subs:
            if not self._bucket.nc.is_closed:
                await sub.unsubscribe()
