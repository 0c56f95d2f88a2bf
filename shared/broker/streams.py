"""Making a stream, or waiting for one: created if missing, left alone if equal, updated
in place if a setting changed, a clear error if a change cannot be made in place; and on a
cluster, the moments a stream cannot answer yet (its replicas not placeable before every
server joined, no leader while one is elected) waited out. What the streams are is
``shared/broker/resources.py``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import nats
from heddle.shared.wire.errors import ResourceMismatch
from nats.js.api import ConsumerConfig, StreamConfig, StreamInfo
from nats.js.errors import NotFoundError

if TYPE_CHECKING:
    from nats.js import JetStreamContext

log = logging.getLogger("heddle.nats")
T = TypeVar("T")

# JetStream's "no suitable peers for placement": more replicas than servers yet.
NO_SUITABLE_PEERS = 10005
PEERS_PATIENCE = 60.0  # seconds a new cluster is given for its servers to join


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


def _seconds(value: object) -> float:
    """A duration as compared: None (unset) is 0."""
    return float(value) if isinstance(value, int | float) else 0.0


def _differences(want: StreamConfig, have: StreamConfig) -> dict[str, tuple[object, object]]:
    out = {}
    for name in _COMPARED:
        w = _plain(getattr(want, name))
        if w is None:
            continue
        h = _plain(getattr(have, name))
        if isinstance(w, float) or isinstance(h, float):
            if abs(_seconds(w) - _seconds(h)) > 1e-6:
                out[name] = (h, w)
        elif w != h and not (name == "allow_direct" and not w):
            out[name] = (h, w)
    return out


async def patiently(ask: Callable[[], Awaitable[T]], about: str, patience: float = 30.0) -> T:
    """What ``ask`` returns, a JetStream request asked again while it goes unanswered (a
    stream without a leader for a moment on a cluster, a server too busy to answer in time),
    until ``patience`` runs out; its other errors are raised at once."""
    delay, deadline = 0.1, time.monotonic() + patience
    while True:
        try:
            return await ask()
        except nats.errors.TimeoutError:
            if time.monotonic() > deadline:
                raise
            log.info("no answer about %s yet; asking again", about)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def _stream_info(js: JetStreamContext, name: str) -> StreamInfo:
    """The stream's info (an absent stream still raises NotFoundError)."""
    return await patiently(lambda: js.stream_info(name), f"stream {name}")


async def _create_stream(
    js: JetStreamContext, name: str, want: StreamConfig, patience: float
) -> StreamInfo:
    """Create the stream. A cluster whose meta leader is elected before every server has
    joined refuses replicas it cannot place yet (no suitable peers): waited out, then a clear
    error."""
    delay, deadline = 0.1, time.monotonic() + patience
    while True:
        try:
            info = await js.add_stream(want)
            log.info("created stream %s", name)
            return info
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != NO_SUITABLE_PEERS:
                raise
            if time.monotonic() > deadline:
                raise ResourceMismatch(
                    name,
                    [
                        f"wants {want.num_replicas} replicas and the cluster had too few "
                        f"JetStream servers to place them for {patience:.0f} s: start the "
                        f"missing servers or lower HEDDLE_REPLICAS"
                    ],
                ) from exc
            log.info(
                "stream %s wants %d replicas: waiting for the cluster's servers to join",
                name,
                want.num_replicas,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def ensure_stream(
    js: JetStreamContext, want: StreamConfig, peers_patience: float = PEERS_PATIENCE
) -> None:
    """Create the stream, or bring an existing one to ``want``: a second start changes
    nothing; a changed setting is applied and logged; an unchangeable one is an error.
    Returns once the stream has a leader."""
    name = want.name
    assert name
    for _ in range(3):
        try:
            info = await _stream_info(js, name)
        except NotFoundError:
            try:
                info = await _create_stream(js, name, want, peers_patience)
            except nats.js.errors.BadRequestError:
                continue  # another service created it at the same moment: compare again
        diff = _differences(want, info.config)
        if not diff:
            await _until_led(js, name, info)
            return
        frozen = [
            f"{k} is {h!r} on the server, settings want {w!r} (cannot be changed in "
            f"place; delete the stream or change the setting back)"
            for k, (h, w) in diff.items()
            if _frozen(k, h)
        ]
        if frozen:
            raise ResourceMismatch(name, frozen)
        info = await js.update_stream(want)
        left = _differences(want, info.config)
        if left:
            raise ResourceMismatch(
                name,
                [
                    f"server did not apply {k} (has {h!r}, wanted {w!r}); is the server too old?"
                    for k, (h, w) in left.items()
                ],
            )
        log.info(
            "updated stream %s: %s",
            name,
            ", ".join(f"{k} {h!r} -> {w!r}" for k, (h, w) in diff.items()),
        )
        await _until_led(js, name, info)
        return
    raise ResourceMismatch(name, ["could not create or read the stream"])


async def _until_led(
    js: JetStreamContext, name: str, info: StreamInfo, patience: float = PEERS_PATIENCE
) -> None:
    """Until the stream has a leader, asking again only while the last ``info`` shows none:
    a stream just made on a cluster has none for a moment, and a write to it then finds no
    responders. A single server always leads its streams."""
    delay, deadline = 0.05, time.monotonic() + patience
    while info.cluster is not None and not info.cluster.leader:
        if time.monotonic() > deadline:
            raise ResourceMismatch(name, [f"has had no leader for {patience:.0f} s"])
        log.info("stream %s has no leader yet (being elected); waiting", name)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
        info = await _stream_info(js, name)


async def ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """Create or update a durable consumer (idempotent)."""
    await js.add_consumer(stream, config)


async def wait_for_stream(js: JetStreamContext, name: str) -> None:
    """Until the stream exists and has a leader: for a user that may not create it (a
    runner). On a cluster a stream being created has no leader for a moment, and a request
    about it is not answered: a timeout is waited out like an absent stream."""
    delay = 0.1
    while True:
        try:
            info = await js.stream_info(name)
            await _until_led(js, name, info)
            return
        except NotFoundError:
            log.info("waiting for stream %s (created by the orchestrator)", name)
        except nats.errors.TimeoutError:
            log.info("waiting for stream %s (no answer yet: a leader being elected)", name)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)
