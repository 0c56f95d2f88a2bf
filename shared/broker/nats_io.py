"""The NATS connection shared by every service: connecting (and reconnecting forever),
waiting for the server at start, closing. The streams and buckets are in ``resources.py``;
reading a bucket's current values in ``kv_reads.py``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import nats
from heddle.shared.broker.nats_permissions import inbox_prefix
from heddle.shared.runtime.metrics import NATS_RECONNECTS, service_of
from heddle.shared.runtime.service import event
from heddle.shared.runtime.settings import Settings
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire.errors import NatsRefused, NatsUnreachable

if TYPE_CHECKING:
    from nats.aio.client import Client

log = logging.getLogger("heddle.nats")


async def connect(
    settings: Settings,
    name: str,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
) -> Client:
    """Connect and stay connected: reconnect forever after a broker outage. A server that
    refuses the user at the first connect raises NatsRefused: a wrong password does not
    get better by retrying (a later refusal, after a rotation, is retried as an outage)."""
    refused = asyncio.Event()

    async def error_cb(exc: Exception) -> None:
        log.warning("nats error: %s", exc)
        if isinstance(exc, nats.errors.AuthorizationError) or "Authorization Violation" in str(exc):
            refused.set()

    reconnects = NATS_RECONNECTS.labels(service_of(name))

    async def reconnected() -> None:
        log.info("nats reconnected")
        reconnects.inc()
        if on_reconnect:
            await on_reconnect()

    async def disconnected() -> None:
        log.warning("nats disconnected")
        if on_disconnect:
            await on_disconnect()

    credentials = credentials_of(settings)
    connecting = asyncio.ensure_future(
        nats.connect(
            servers=settings.nats_url.split(","),
            name=name,
            **credentials,
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
    )
    denied = asyncio.ensure_future(refused.wait())
    await asyncio.wait((connecting, denied), return_when=asyncio.FIRST_COMPLETED)
    if connecting.done():
        denied.cancel()
        return connecting.result()
    await cancel_and_wait(connecting)
    raise NatsRefused(settings.nats_user, settings.nats_url)


async def connect_once(settings: Settings, name: str) -> Client:
    """One connection for a command that does its work and ends (``heddle backup``,
    ``heddle restore``): no reconnecting, and a server that is not there or refuses the
    user is NatsUnreachable at once, with the reason."""

    async def quiet(exc: Exception) -> None:
        """The reason is raised (or a request goes unanswered): nats-py would log it again
        with a traceback on the command's output."""

    try:
        return await nats.connect(
            servers=settings.nats_url.split(","),
            name=name,
            **credentials_of(settings),
            error_cb=quiet,
            allow_reconnect=False,
            connect_timeout=5,
            max_reconnect_attempts=0,
        )
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        why = str(exc) or repr(exc)
        raise NatsUnreachable(settings.nats_url, settings.nats_user, why) from None


def credentials_of(settings: Settings) -> dict[str, str]:
    """nats.connect's user, password and inbox prefix (none for an anonymous connection)."""
    if not settings.nats_user:
        return {}
    return {
        "user": settings.nats_user,
        "password": password(settings),
        "inbox_prefix": inbox_prefix(settings.nats_user),
    }


def password(settings: Settings) -> str:
    if settings.nats_password_file:
        with open(settings.nats_password_file) as f:
            return f.read().strip()
    return settings.nats_password


async def close(nc: Client | None) -> None:
    """Flush what was published and close. In-flight work was already drained by the
    service itself, so a subscription drain (which waits on every KV watcher) is not needed."""
    if nc is None or nc.is_closed:
        return
    with contextlib.suppress(Exception):
        await nc.flush(timeout=2)
    try:
        await asyncio.wait_for(nc.close(), 3)
    except (nats.errors.Error, TimeoutError) as exc:
        log.warning("closing the NATS connection: %r", exc)
    # What the connection carried over its life: messages per step are what cost (the bench
    # keeps these lines with HEDDLE_BENCH_KEEP).
    stats = nc.stats
    event(
        log,
        "nats closed",
        messages_in=stats["in_msgs"],
        messages_out=stats["out_msgs"],
        bytes_in=stats["in_bytes"],
        bytes_out=stats["out_bytes"],
        reconnects=stats["reconnects"],
    )


async def connect_until_ready(
    settings: Settings,
    name: str,
    on_reconnect: Callable[[], Awaitable[None]] | None = None,
    on_disconnect: Callable[[], Awaitable[None]] | None = None,
) -> Client:
    """Connect, retrying while the server is not up yet (services may start before NATS)."""
    delay = 0.2
    while True:
        try:
            return await connect(settings, name, on_reconnect, on_disconnect)
        except (TimeoutError, OSError, nats.errors.NoServersError) as exc:
            log.warning(
                "nats not reachable at %s (%s); retrying in %.1fs", settings.nats_url, exc, delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
