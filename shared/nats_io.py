"""The NATS edge shared by every service: connecting, the server version check, and the
idempotent creation of Heddle's streams and KV buckets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from shared import names
from shared.contracts import RunRecord, StepRecord, step_record_decoder
from shared.errors import JetStreamUnavailable, NatsTooOld, ResourceMismatch
from shared.settings import Settings

log = logging.getLogger("heddle.nats")

# Message schedules (retry timers) need 2.12; per-key TTL with limit markers 2.11. The
# schedule and TTL semantics Heddle relies on were checked on 2.14+.
MIN_API_LEVEL = 4
MIN_SERVER_VERSION = "2.14"

ALL_BUCKETS = (
    names.WORKFLOWS_BUCKET,
    names.RUNS_BUCKET,
    names.HEARTBEATS_BUCKET,
    names.RUNNERS_BUCKET,
    names.CRON_BUCKET,
)
ALL_STREAMS = (names.CMD_STREAM, names.STEPS_STREAM, names.EVENTS_STREAM, names.LOGS_STREAM)
DAY = 86400.0
PULL_EXPIRES = 2.0  # seconds a replay's pull waits at most for keys deleted meanwhile


async def connect(
    settings: Settings,
    name: str,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
) -> Client:
    """Connect and stay connected: reconnect forever after a broker outage."""

    async def error_cb(exc: Exception) -> None:
        log.warning("nats error: %s", exc)

    async def reconnected() -> None:
        log.info("nats reconnected")
        if on_reconnect:
            await on_reconnect()

    async def disconnected() -> None:
        log.warning("nats disconnected")
        if on_disconnect:
            await on_disconnect()

    return await nats.connect(
        servers=settings.nats_url.split(","),
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        ping_interval=5,
        max_outstanding_pings=3,
        connect_timeout=5,
        allow_reconnect=True,
        error_cb=error_cb,
        reconnected_cb=reconnected,
        disconnected_cb=disconnected,
        pending_size=64 * 1024 * 1024,
    )


async def close(nc: Client | None) -> None:
    """Flush what was published and close. In-flight work was already drained by the
    service itself, so a subscription drain (which waits on every KV watcher) is not needed."""
    if nc is None or nc.is_closed:
        return
    with contextlib.suppress(Exception):
        await nc.flush(timeout=2)
    try:
        await asyncio.wait_for(nc.close(), 3)
    except Exception as exc:
        log.warning("closing the NATS connection: %r", exc)


async def connect_until_ready(settings: Settings, name: str, **kwargs: object) -> Client:
    """Connect, retrying while the server is not up yet (services may start before NATS)."""
    delay = 0.2
    while True:
        try:
            return await connect(settings, name, **kwargs)  # type: ignore[arg-type]
        except (TimeoutError, OSError, nats.errors.NoServersError) as exc:
            log.warning(
                "nats not reachable at %s (%s); retrying in %.1fs", settings.nats_url, exc, delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


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
    kv: dict[str, KeyValue]


def _storage(settings: Settings) -> StorageType:
    return StorageType.FILE if settings.storage == "file" else StorageType.MEMORY


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
    }


def bucket_configs(settings: Settings) -> dict[str, StreamConfig]:
    """KV buckets as the streams behind them, built as nats-py's create_key_value does, so
    that one comparison path handles streams and buckets alike."""
    storage = _storage(settings)

    def kv(bucket: str, description: str, marker_ttl: float | None = None) -> StreamConfig:
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
        )

    return {
        names.WORKFLOWS_BUCKET: kv(names.WORKFLOWS_BUCKET, "Versioned workflow definitions"),
        names.RUNS_BUCKET: kv(names.RUNS_BUCKET, "Run and step state, owned by the orchestrator"),
        names.HEARTBEATS_BUCKET: kv(names.HEARTBEATS_BUCKET, "Step heartbeats from runners"),
        # Registry entries carry a TTL; the marker tells watchers when a runner left.
        names.RUNNERS_BUCKET: kv(names.RUNNERS_BUCKET, "Runner registry", marker_ttl=1.0),
        names.CRON_BUCKET: kv(names.CRON_BUCKET, "Cron slots, each created at most once"),
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
)
_IMMUTABLE = ("retention", "storage")


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


async def ensure_stream(js: JetStreamContext, want: StreamConfig) -> None:
    """Create the stream, or bring an existing one to ``want``: a second start changes
    nothing; a changed setting is applied and logged; an unchangeable one is an error."""
    assert want.name
    for _ in range(3):
        try:
            have = (await js.stream_info(want.name)).config
        except NotFoundError:
            try:
                have = (await js.add_stream(want)).config
                log.info("created stream %s", want.name)
            except nats.js.errors.BadRequestError:
                continue  # another service created it at the same moment: compare again
        diff = _differences(want, have)
        if not diff:
            return
        frozen = [
            f"{k} is {h!r} on the server, settings want {w!r} (cannot be changed in "
            f"place; delete the stream or change the setting back)"
            for k, (h, w) in diff.items()
            if k in _IMMUTABLE
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


async def ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """Create or update a durable consumer (idempotent)."""
    await js.add_consumer(stream, config)


async def ensure_resources(
    nc: Client,
    settings: Settings,
    streams: tuple[str, ...] = ALL_STREAMS,
    buckets: tuple[str, ...] = ALL_BUCKETS,
) -> Resources:
    js = nc.jetstream(timeout=10)
    await require_server(js)
    s_cfg = stream_configs(settings)
    b_cfg = bucket_configs(settings)
    await asyncio.gather(
        *(ensure_stream(js, s_cfg[s]) for s in streams),
        *(ensure_stream(js, b_cfg[b]) for b in buckets),
    )
    kv = {b: await js.key_value(b) for b in buckets}
    return Resources(js=js, kv=kv)


async def _last_per_key_consumer(
    js: JetStreamContext, stream: str, filter_subject: str
) -> ConsumerInfo:
    """A short-lived pull consumer over the last message of each matching key; its
    ``num_pending`` at creation is the server's count of those keys. Callers delete it."""
    return await js.add_consumer(
        stream,
        ConsumerConfig(
            filter_subject=filter_subject,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=10.0,
            mem_storage=True,
            num_replicas=1,
        ),
    )


async def read_current(kv: KeyValue, pattern: str, timeout: float = 10.0) -> list[KeyValue.Entry]:
    """Current values of every key matching ``pattern``: one replay of the bucket's stream
    (last message per key), not a get per key.

    A short-lived pull consumer is created on the server, which says at creation how many
    keys match (``num_pending``); exactly that many are pulled in one request, and
    the consumer is deleted. The end of the replay is thus the server's count, not a guess:
    nats-py's ``kv.watch`` judges it from what the client has processed so far, and under
    load reported runs with no steps. Its push consumers also linger after unsubscribing,
    which a gateway polling runs would pile up.
    """
    js: JetStreamContext = kv._js  # nats-py exposes no public accessors for these
    nc: Client = js._nc
    prefix: str = kv._pre
    info = await _last_per_key_consumer(js, kv._stream, f"{prefix}{pattern}")
    try:
        expected = info.num_pending or 0
        if expected == 0:
            return []
        inbox = nc.new_inbox()
        queue: asyncio.Queue[Msg] = asyncio.Queue()

        async def collect(msg: Msg) -> None:
            queue.put_nowait(msg)

        sub = await nc.subscribe(inbox, cb=collect)
        try:
            # Not no_wait: right after creation a consumer may answer "no messages" before
            # it has caught up with its own count. With an expiry, the request waits for the
            # messages and returns as soon as the batch is full; it only runs out when a key
            # was deleted meanwhile.
            request = json.dumps({"batch": expected, "expires": int(PULL_EXPIRES * 1e9)}).encode()
            await nc.publish(
                f"$JS.API.CONSUMER.MSG.NEXT.{kv._stream}.{info.name}", request, reply=inbox
            )
            latest: dict[str, KeyValue.Entry] = {}
            seen = 0
            while seen < expected:
                msg = await asyncio.wait_for(queue.get(), timeout)
                headers = msg.headers or {}
                if not msg.data and "Status" in headers:
                    break  # 408: the request expired (a key was deleted meanwhile)
                seen += 1
                key = msg.subject[len(prefix) :]
                deleted = headers.get("KV-Operation") in ("DEL", "PURGE") or (
                    "Nats-Marker-Reason" in headers
                )
                if deleted or not msg.data:
                    latest.pop(key, None)
                    continue
                meta = msg.metadata
                latest[key] = KeyValue.Entry(
                    bucket=kv._name,
                    key=key,
                    value=msg.data,
                    revision=meta.sequence.stream,
                    delta=meta.num_pending,
                    created=meta.timestamp,
                    operation=None,
                )
            return list(latest.values())
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
    finally:
        with contextlib.suppress(Exception):
            await js.delete_consumer(kv._stream, info.name)


async def read_steps(runs_kv: KeyValue, run: RunRecord, attempts: int = 5) -> list[StepRecord]:
    """Every step record of ``run``, in document order. The run record says how many there
    are: a replay that comes back short (it has been seen once under heavy load, cause not
    pinned down) is read again rather than shown or acted on."""
    steps: list[StepRecord] = []
    for attempt in range(attempts):
        entries = await read_current(runs_kv, names.steps_of_run(run.run_id))
        steps = [step_record_decoder.decode(e.value) for e in entries]
        if len(steps) >= run.step_count:
            break
        log.warning(
            "run %s: read %d of %d step records (try %d); reading again",
            run.run_id,
            len(steps),
            run.step_count,
            attempt + 1,
        )
        await asyncio.sleep(0.05 * (attempt + 1))
    steps.sort(key=lambda s: s.index)
    return steps


async def count_keys(js: JetStreamContext, bucket: str, pattern: str) -> int:
    """How many keys of ``bucket`` match ``pattern``, counted by the server: the pending
    count of a short-lived consumer that delivers the last message per key."""
    stream = names.kv_stream(bucket)
    info = await _last_per_key_consumer(js, stream, names.kv_subject(bucket, pattern))
    with contextlib.suppress(Exception):
        await js.delete_consumer(stream, info.name)
    return info.num_pending or 0


def stored_at(entry: KeyValue.Entry) -> float | None:
    """When the server stored a KV entry (epoch seconds), from a watch entry's metadata."""
    created = entry.created
    if created is None:
        return None
    if isinstance(created, int | float):
        return float(created)
    return created.timestamp()
