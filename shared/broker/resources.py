"""Heddle's streams and KV buckets: their configuration from the settings, the server
version check, and ``ensure_resources``, which makes or waits for them at a service's start
(each one through ``shared/broker/streams.py``)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import nats
from heddle.shared.broker.buckets import Bucket, open_bucket
from heddle.shared.broker.streams import ensure_stream, patiently, wait_for_stream
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.errors import JetStreamUnavailable, NatsTooOld
from nats.js.api import (
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    SubjectTransform,
)

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

log = logging.getLogger("heddle.nats")

# Message schedules (retry timers) need 2.12; per-key TTL with limit markers 2.11. The
# schedule and TTL semantics Heddle relies on were checked on 2.14+.
MIN_API_LEVEL = 4
MIN_SERVER_VERSION = "2.14"

ALL_BUCKETS = names.ALL_BUCKETS
ALL_STREAMS = names.ALL_STREAMS
DAY = 86400.0


async def require_server(js: JetStreamContext) -> int:
    """The server's JetStream API level, or NatsTooOld naming the version Heddle needs. A
    server too busy to answer in time (many services starting at once) is asked again."""
    try:
        info = await patiently(js.account_info, "JetStream")
    except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError) as exc:
        raise JetStreamUnavailable(
            "JetStream is not enabled on this NATS server: start nats-server with -js "
            f"(Heddle needs nats-server {MIN_SERVER_VERSION} or newer with JetStream)"
        ) from exc
    level = (info.api.level if info.api else 0) or 0
    check_api_level(level)
    return level


def check_api_level(level: int) -> None:
    if level < MIN_API_LEVEL:
        raise NatsTooOld(level, MIN_API_LEVEL, MIN_SERVER_VERSION)


@dataclass(frozen=True, slots=True)
class Resources:
    js: JetStreamContext
    kv: dict[str, Bucket]


def _storage(settings: Settings) -> StorageType:
    return StorageType.FILE if settings.storage == "file" else StorageType.MEMORY


def _partitioning(published: str, run_wildcard: int, settings: Settings) -> SubjectTransform:
    """Messages published as ``published`` stored with their run's partition appended."""
    dest = names.partitioned(published, settings.partitions, run_wildcard)
    return SubjectTransform(src=published, dest=dest)


def stream_configs(settings: Settings) -> dict[str, StreamConfig]:
    storage = _storage(settings)
    return {
        names.CMD_STREAM: StreamConfig(
            name=names.CMD_STREAM,
            subjects=[names.CMD_ALL, names.SCHED_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
            duplicate_window=120,
            allow_msg_schedules=True,
            subject_transform=_partitioning(names.CMD_PUBLISHED, names.CMD_RUN_WILDCARD, settings),
            description="Heddle commands and retry timers",
            storage=storage,
            num_replicas=settings.replicas,
        ),
        names.STEPS_STREAM: StreamConfig(
            name=names.STEPS_STREAM,
            subjects=[names.STEP_READY_ALL],
            retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=120,
            description="Steps ready to run, consumed by the dispatcher",
            storage=storage,
            num_replicas=settings.replicas,
        ),
        names.EVENTS_STREAM: StreamConfig(
            name=names.EVENTS_STREAM,
            subjects=[names.EVT_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
            duplicate_window=120,
            subject_transform=_partitioning(names.EVT_PUBLISHED, names.EVT_RUN_WILDCARD, settings),
            description="Step lifecycle events from runners",
            storage=storage,
            num_replicas=settings.replicas,
        ),
        names.LOGS_STREAM: StreamConfig(
            name=names.LOGS_STREAM,
            subjects=[names.LOG_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=settings.log_max_age,
            max_bytes=settings.log_max_bytes,
            discard=DiscardPolicy.OLD,
            description="Step output lines and transitions",
            storage=storage,
            num_replicas=settings.replicas,
        ),
        # Kept as long as the commands that name them; the orchestrator purges a document
        # once its run is stored (shared/broker/documents.py).
        names.DOCS_STREAM: StreamConfig(
            name=names.DOCS_STREAM,
            subjects=[names.DOC_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
            allow_direct=True,
            description="Documents too large for their command, in chunks",
            storage=storage,
            num_replicas=settings.replicas,
        ),
    }


def bucket_configs(settings: Settings) -> dict[str, StreamConfig]:
    """KV buckets as the streams behind them, built as nats-py's create_key_value does, so
    that one comparison path handles streams and buckets alike."""
    storage = _storage(settings)

    def kv(
        bucket: str,
        description: str,
        marker_ttl: float | None = None,
        transform: SubjectTransform | None = None,
    ) -> StreamConfig:
        return StreamConfig(
            name=names.kv_stream(bucket),
            subjects=[f"$KV.{bucket}.>"],
            description=description,
            allow_rollup_hdrs=True,
            allow_msg_ttl=True,
            deny_delete=True,
            discard=DiscardPolicy.NEW,
            duplicate_window=120,
            max_msgs=-1,
            max_consumers=-1,
            max_msgs_per_subject=1,
            storage=storage,
            num_replicas=settings.replicas,
            allow_direct=True,
            subject_delete_marker_ttl=marker_ttl,
            subject_transform=transform,
        )

    return {
        names.WORKFLOWS_BUCKET: kv(names.WORKFLOWS_BUCKET, "Versioned workflow definitions"),
        names.RUNS_BUCKET: kv(names.RUNS_BUCKET, "Run and step state, owned by the orchestrator"),
        names.HEARTBEATS_BUCKET: kv(
            names.HEARTBEATS_BUCKET,
            "Step heartbeats from runners",
            transform=_partitioning(
                names.kv_subject(names.HEARTBEATS_BUCKET, names.HEARTBEAT_PUBLISHED),
                names.HEARTBEAT_RUN_WILDCARD,
                settings,
            ),
        ),
        # Registry entries carry a TTL; the marker tells watchers when a runner left.
        names.RUNNERS_BUCKET: kv(names.RUNNERS_BUCKET, "Runner registry", marker_ttl=1.0),
        names.CRON_BUCKET: kv(names.CRON_BUCKET, "Cron slots, each created at most once"),
        names.TOKENS_BUCKET: kv(names.TOKENS_BUCKET, "API token records (hashes only)"),
        names.PODS_BUCKET: kv(names.PODS_BUCKET, "Runner pods, as the orchestrator sees them"),
        names.LEASES_BUCKET: kv(names.LEASES_BUCKET, "Orchestrators and their partitions"),
        names.SEMAPHORES_BUCKET: kv(names.SEMAPHORES_BUCKET, "Semaphores: sizes and holders"),
        names.CONCURRENCY_BUCKET: kv(names.CONCURRENCY_BUCKET, "Concurrency keys: holders, queue"),
        names.NAMESPACES_BUCKET: kv(names.NAMESPACES_BUCKET, "Namespaces and their quotas"),
        names.APPROVALS_BUCKET: kv(names.APPROVALS_BUCKET, "Approval gates and their answers"),
        names.SECRETS_BUCKET: kv(names.SECRETS_BUCKET, "Webhook and notify secrets"),
        names.NOTIFICATIONS_BUCKET: kv(names.NOTIFICATIONS_BUCKET, "Deliveries of run ends"),
    }


# Fields compared against the server's copy; the rest are server defaults.
async def ensure_resources(
    nc: Client,
    settings: Settings,
    streams: tuple[str, ...] = ALL_STREAMS,
    buckets: tuple[str, ...] = ALL_BUCKETS,
    create: bool = True,
) -> Resources:
    """The streams and buckets, created or brought to the settings; with ``create`` False,
    only waited for (a runner's permissions let it look, not create)."""
    js = nc.jetstream(timeout=settings.nats_timeout)
    await require_server(js)
    s_cfg = stream_configs(settings)
    b_cfg = bucket_configs(settings)
    if create:
        await asyncio.gather(
            *(ensure_stream(js, s_cfg[s]) for s in streams),
            *(ensure_stream(js, b_cfg[b]) for b in buckets),
        )
    else:
        wanted = [s_cfg[s].name for s in streams] + [b_cfg[b].name for b in buckets]
        await asyncio.gather(*(wait_for_stream(js, n) for n in wanted if n))
    kv = {b: await open_bucket(nc, js, b, settings.nats_timeout) for b in buckets}
    return Resources(js=js, kv=kv)
