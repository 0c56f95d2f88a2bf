"""A KV bucket handle: nats-py's KeyValue, plus what a replay of the bucket needs and
KeyValue keeps private (the connection, the bucket's name, its stream and key prefix)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from heddle.shared.wire import names
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext


# How long a replay waits for each next message by default: HEDDLE_NATS_TIMEOUT's default.
REPLAY_TIMEOUT = 10.0


class Bucket(KeyValue):
    """Every KeyValue call, and in the open: ``nc``, ``js``, ``bucket``, ``stream``,
    ``prefix``, ``direct``, ``batched`` and ``timeout`` (what ``shared/broker/kv_reads.py`` reads
    with)."""

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        bucket: str,
        direct: bool,
        timeout: float = REPLAY_TIMEOUT,
        replicas: int = 1,
    ) -> None:
        self.nc = nc
        self.js = js
        self.timeout = timeout
        self.direct = direct  # direct gets allowed: any replica answers a read
        # Many keys read in one direct get only from a single copy: a follower may lag the
        # leader, and a list of a run's steps must be as new as the run record read before.
        self.batched = direct and replicas == 1
        self.bucket = bucket
        self.stream = names.kv_stream(bucket)
        self.prefix = names.kv_subject(bucket, "")
        super().__init__(name=bucket, stream=self.stream, pre=self.prefix, js=js, direct=direct)


async def open_bucket(
    nc: Client, js: JetStreamContext, bucket: str, timeout: float = REPLAY_TIMEOUT
) -> Bucket:
    """The bucket as ``js.key_value`` opens it: its stream must exist. ``timeout``: how long
    a replay of it waits for an answer (HEDDLE_NATS_TIMEOUT, as the ``js`` requests do)."""
    try:
        info = await js.stream_info(names.kv_stream(bucket))
    except NotFoundError as exc:
        raise BucketNotFoundError from exc
    direct, replicas = bool(info.config.allow_direct), info.config.num_replicas or 1
    return Bucket(nc, js, bucket, direct=direct, timeout=timeout, replicas=replicas)
