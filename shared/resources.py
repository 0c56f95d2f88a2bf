"""Heddle's streams and KV buckets: their configuration from the settings, the server
version check, and their idempotent creation (created if missing, left alone if equal,
updated in place if a setting changed, a clear error if a change cannot be made in place)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats
from nats.js.api import (
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    SubjectTransform,
)
from nats.js.errors import NotFoundError

from shared import names
from shared.buckets import Bucket, open_bucket
from shared.errors import JetStreamUnavailable, NatsTooOld, ResourceMismatch
from shared.settings import Settings

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

log = logging.getLogger("heddle.nats")

# Message schedules (retry timers) need 2.12; per-key TTL with limit markers 2.11. The
# schedule and TTL semantics Heddle relies on were checked on 2.14+.
MIN_API_LEVEL = 4
MIN_SERVER_VERSION = "2.14"

ALL_BUCKETS = names.ALL_BUCKETS
# JetStream's "no suitable peers for placement": more replicas than servers yet.
NO_SUITABLE_PEERS = 10005
PEERS_PATIENCE = 60.0  # seconds a new cluster is given for its servers to join
ALL_STREAMS = names.ALL_STREAMS
DAY = 86400.0


async def require_server(js: JetStreamContext) -> int:
    """The server's JetStream API level, or NatsTooOld naming the version Heddle needs."""
    try:
        info = await js.account_info()
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
    common = {"storage": storage, "num_replicas": settings.replicas}
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
            **common,
        ),
        names.STEPS_STREAM: StreamConfig(
            name=names.STEPS_STREAM,
            subjects=[names.STEP_READY_ALL],
            retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=120,
            description="Steps ready to run, consumed by the dispatcher",
            **common,
        ),
        names.EVENTS_STREAM: StreamConfig(
            name=names.EVENTS_STREAM,
            subjects=[names.EVT_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
            duplicate_window=120,
            subject_transform=_partitioning(names.EVT_PUBLISHED, names.EVT_RUN_WILDCARD, settings),
            description="Step lifecycle events from runners",
            **common,
        ),
        names.LOGS_STREAM: StreamConfig(
            name=names.LOGS_STREAM,
            subjects=[names.LOG_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=settings.log_max_age,
            max_bytes=settings.log_max_bytes,
            discard=DiscardPolicy.OLD,
            description="Step output lines and transitions",
            **common,
        ),
        # Kept as long as the commands that name them; the orchestrator purges a document
        # once its run is stored (shared/documents.py).
        names.DOCS_STREAM: StreamConfig(
            name=names.DOCS_STREAM,
            subjects=[names.DOC_ALL],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
            allow_direct=True,
            description="Documents too large for their command, in chunks",
            **common,
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
    }


# Fields compared against the server's copy; the rest are server defaults.
_COMPARED = (
    "subjects",
    "retention",
    "max_age",
    "max_bytes",
    "storage",
    "num_replicas",
    "allow_msg_schedules",
    "allow_msg_ttl",
    "subject_delete_marker_ttl",
    "max_msgs_per_subject",
    "discard",
    "allow_direct",
    "subject_transform",
)
_IMMUTABLE = ("retention", "storage")


def _frozen(name: str, have: object) -> bool:
    """A stream's partitioning may be added, never changed: stored commands and events
    would be left in partitions nobody reads."""
    return name in _IMMUTABLE or (name == "subject_transform" and have is not None)


def _plain(value: object) -> object:
    return getattr(value, "value", value)  # enums compare and print as their wire value


def _differences(want: StreamConfig, have: StreamConfig) -> dict[str, tuple[object, object]]:
    out = {}
    for name in _COMPARED:
        w = _plain(getattr(want, name))
        if w is None:
            continue
        h = _plain(getattr(have, name))
        if isinstance(w, float) or isinstance(h, float):
            if abs(float(w or 0) - float(h or 0)) > 1e-6:
                out[name] = (h, w)
        elif w != h and not (name == "allow_direct" and not w):
            out[name] = (h, w)
    return out


async def _stream_info(js: JetStreamContext, name: str, patience: float = 30.0) -> Any:
    """The stream's info; on a cluster a stream without a leader for a moment answers
    nothing, and that timeout is waited out (an absent stream still raises NotFoundError)."""
    delay, deadline = 0.1, time.monotonic() + patience
    while True:
        try:
            return await js.stream_info(name)
        except nats.errors.TimeoutError:
            if time.monotonic() > deadline:
                raise
            log.info("no answer about stream %s yet (a leader being elected); asking again", name)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def _create_stream(js: JetStreamContext, want: StreamConfig, patience: float) -> Any:
    """Create the stream. A cluster whose meta leader is elected before every server has
    joined refuses replicas it cannot place yet (no suitable peers): waited out, then a clear
    error."""
    delay, deadline = 0.1, time.monotonic() + patience
    while True:
        try:
            config = (await js.add_stream(want)).config
            log.info("created stream %s", want.name)
            return config
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != NO_SUITABLE_PEERS:
                raise
            if time.monotonic() > deadline:
                raise ResourceMismatch(
                    want.name,
                    [
                        f"wants {want.num_replicas} replicas and the cluster had too few "
                        f"JetStream servers to place them for {patience:.0f} s: start the "
                        f"missing servers or lower HEDDLE_REPLICAS"
                    ],
                ) from exc
            log.info(
                "stream %s wants %d replicas: waiting for the cluster's servers to join",
                want.name,
                want.num_replicas,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def ensure_stream(
    js: JetStreamContext, want: StreamConfig, peers_patience: float = PEERS_PATIENCE
) -> None:
    """Create the stream, or bring an existing one to ``want``: a second start changes
    nothing; a changed setting is applied and logged; an unchangeable one is an error."""
    assert want.name
    for _ in range(3):
        try:
            have = (await _stream_info(js, want.name)).config
        except NotFoundError:
            try:
                have = await _create_stream(js, want, peers_patience)
            except nats.js.errors.BadRequestError:
                continue  # another service created it at the same moment: compare again
        diff = _differences(want, have)
        if not diff:
            return
        frozen = [
            f"{k} is {h!r} on the server, settings want {w!r} (cannot be changed in "
            f"place; delete the stream or change the setting back)"
            for k, (h, w) in diff.items()
            if _frozen(k, h)
        ]
        if frozen:
            raise ResourceMismatch(want.name, frozen)
        updated = (await js.update_stream(want)).config
        left = _differences(want, updated)
        if left:
            raise ResourceMismatch(
                want.name,
                [
                    f"server did not apply {k} (has {h!r}, wanted {w!r}); is the server too old?"
                    for k, (h, w) in left.items()
                ],
            )
        log.info(
            "updated stream %s: %s",
            want.name,
            ", ".join(f"{k} {h!r} -> {w!r}" for k, (h, w) in diff.items()),
        )
        return
    raise ResourceMismatch(want.name, ["could not create or read the stream"])


async def until_led(js: JetStreamContext, name: str, patience: float = PEERS_PATIENCE) -> None:
    """Until the stream has a leader (a single server always leads its streams)."""
    delay, deadline = 0.05, time.monotonic() + patience
    while True:
        cluster = (await _stream_info(js, name)).cluster
        if cluster is None or cluster.leader:
            return
        if time.monotonic() > deadline:
            raise ResourceMismatch(name, [f"has had no leader for {patience:.0f} s"])
        log.info("stream %s has no leader yet (being elected); waiting", name)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """Create or update a durable consumer (idempotent)."""
    await js.add_consumer(stream, config)


async def wait_for_stream(js: JetStreamContext, name: str) -> None:
    """Until the stream exists: for a user that may not create it (a runner). On a cluster a
    stream being created has no leader for a moment, and a request about it is not answered:
    a timeout is waited out like an absent stream."""
    delay = 0.1
    while True:
        try:
            await js.stream_info(name)
            return
        except NotFoundError:
            log.info("waiting for stream %s (created by the orchestrator)", name)
        except nats.errors.TimeoutError:
            log.info("waiting for stream %s (no answer yet: a leader being elected)", name)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


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
    wanted = [n for n in [s_cfg[s].name for s in streams] + [b_cfg[b].name for b in buckets] if n]
    if create:
        await asyncio.gather(
            *(ensure_stream(js, s_cfg[s]) for s in streams),
            *(ensure_stream(js, b_cfg[b]) for b in buckets),
        )
    else:
        await asyncio.gather(*(wait_for_stream(js, n) for n in wanted))
    # A stream just made on a cluster has no leader for a moment, and a write to it then
    # finds no responders: a service's first write (a runner's registration) waits for it.
    await asyncio.gather(*(until_led(js, n) for n in wanted))
    kv = {b: await open_bucket(nc, js, b, settings.nats_timeout) for b in buckets}
    return Resources(js=js, kv=kv)
