"""The current values of a bucket's matching keys in one request: a batched direct get
(``multi_last``, nats-server 2.11+), answered by the stream with the last message of each
subject up to one sequence, then an end-of-batch status. No consumer is made on the server,
which makes it several times cheaper than a replay for a small set (a run's steps).

The server answers at most ``MULTI_LAST_MAX`` subjects (deleted keys count): past that it
says 413 and the caller replays instead (``shared/kv_reads.py``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec
from nats.js.kv import KeyValue

from shared.timefmt import parse

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from shared.buckets import Bucket

MULTI_LAST_MAX = 1024  # subjects one batched direct get answers for
END = "204"  # end of batch
TOO_MANY = "413"
NOT_FOUND = "404"  # no subject matches
_request = msgspec.json.Encoder().encode


class TooMany(Exception):
    """More keys match than one batched get answers for."""


async def last_values(kv: Bucket, pattern: str, timeout: float) -> list[KeyValue.Entry]:
    """Every key matching ``pattern`` that has a value, as entries; TooMany past the
    server's cap. The bucket must allow direct gets; any of its replicas may answer."""
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    inbox = kv.nc.new_inbox()

    async def put(msg: Msg) -> None:
        queue.put_nowait(msg)

    sub = await kv.nc.subscribe(inbox, cb=put)
    try:
        body = {"multi_last": [kv.prefix + pattern], "batch": MULTI_LAST_MAX}
        await kv.nc.publish(f"$JS.API.DIRECT.GET.{kv.stream}", _request(body), reply=inbox)
        entries: list[KeyValue.Entry] = []
        while True:
            msg = await asyncio.wait_for(queue.get(), timeout)
            headers = msg.headers or {}
            status = headers.get("Status")
            if status is not None and not msg.data:
                if status in (END, NOT_FOUND):
                    return entries
                if status == TOO_MANY:
                    raise TooMany(pattern)
                raise RuntimeError(f"batched get of {kv.stream} {pattern}: status {status}")
            if headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers:
                continue  # deleted, purged or expired
            if msg.data:
                entries.append(_entry(kv, headers, msg.data))
    finally:
        await sub.unsubscribe()


def _entry(kv: Bucket, headers: dict[str, str], value: bytes) -> KeyValue.Entry:
    stamp = headers.get("Nats-Time-Stamp")
    return KeyValue.Entry(
        bucket=kv.bucket,
        key=headers["Nats-Subject"][len(kv.prefix) :],
        value=value,
        revision=int(headers["Nats-Sequence"]),
        delta=int(headers.get("Nats-Num-Pending", 0)),
        created=parse(stamp).timestamp() if stamp else None,  # type: ignore[arg-type]
        operation=None,
    )
