"""The gateway's sender of run ends (docs/notifications.md): it follows heddle-notifications
(the watch replays every record first, so nothing pending is lost across a restart), keeps
a timer per pending delivery for when it is next due, and sends each in a task of its own.

A delivery is claimed by compare-and-set before it is sent, with an expiry in its record:
two gateways never send the same attempt at once, and one that died mid-send leaves a claim
that runs out. Sends are bounded overall and per target host, so a slow target holds up
only its own deliveries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import aiohttp
from heddle.services.gateway.notify.post import post
from heddle.shared.broker.kv_reads import read_steps, value_of
from heddle.shared.broker.kv_watch import follow
from heddle.shared.broker.nats_types import KeyNotFoundError, KeyWrongLastSequenceError, NatsError
from heddle.shared.core.notify_plan import Policy, after_attempt, claimed, due_at
from heddle.shared.core.notify_summary import summary_body
from heddle.shared.runtime.metrics import NOTIFY_ATTEMPTS
from heddle.shared.runtime.service import event
from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names
from heddle.shared.wire.contracts import (
    Notification,
    NotifyAttempt,
    encode,
    notification_decoder,
    run_record_decoder,
)

if TYPE_CHECKING:
    from heddle.shared.broker.buckets import Bucket
    from heddle.shared.broker.nats_types import KeyValue
    from heddle.shared.runtime.settings import Settings

log = logging.getLogger("heddle.gateway.notify")
MAX_SENDS = 32  # POSTs in flight at once
PER_HOST = 4  # of them to one target host
DRAIN = 5.0  # seconds a stopping gateway lets its sends in flight finish
OUTCOMES = {"delivered": "delivered", "pending": "failed", "gave-up": "gave_up"}


class Notifier:
    def __init__(
        self, settings: Settings, notifications: KeyValue, runs: Bucket, secrets: KeyValue
    ) -> None:
        self.kv, self.runs, self.secrets = notifications, runs, secrets
        self.policy = Policy(
            timeout=settings.notify_timeout,
            backoff_base=settings.notify_backoff,
            retry_for=settings.notify_retry_for,
        )
        self.public_url = settings.public_url
        self.drain = min(DRAIN, settings.shutdown_grace)
        self._known: dict[str, Notification] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._sending: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(MAX_SENDS)
        self._hosts = HostLimits(PER_HOST)
        self._session: aiohttp.ClientSession | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False  # nothing more is planned: the sends in flight drain

    def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.policy.timeout)
        self._session = aiohttp.ClientSession(timeout=timeout)
        self._watch = asyncio.create_task(
            follow(
                self.kv,
                self._on_entry,
                what="notifications",
                log=log,
                on_caught_up=lambda: None,
            )
        )

    async def stop(self) -> None:
        """Stop following; the sends in flight get ``drain`` seconds, then are cancelled
        (their claims run out, and a gateway sends them again)."""
        self._stopping = True
        await cancel_and_wait(self._watch)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        sending = list(self._sending.values())
        if sending:
            await asyncio.wait(sending, timeout=self.drain)
        await cancel_and_wait(*sending)
        if self._session is not None:
            await self._session.close()

    # ---- what is due, and when ----

    async def _on_entry(self, entry: KeyValue.Entry) -> None:
        gone = entry.operation in ("DEL", "PURGE") or not entry.value
        self._remember(entry.key, None if gone else notification_decoder.decode(entry.value or b""))

    def _remember(self, key: str, n: Notification | None) -> None:
        """The newest record of ``key`` kept while it is pending (a settled one is let go:
        the bucket holds every delivery of every run kept), and its timer set for it."""
        self._keep(key, n)
        self._plan(key)

    def _keep(self, key: str, n: Notification | None) -> None:
        if n is None or n.state != "pending":
            self._known.pop(key, None)
        else:
            self._known[key] = n

    def _plan(self, key: str) -> None:
        """The timer of ``key`` set for when its delivery is next due (none once settled)."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        n = self._known.get(key)
        now = time.time()
        at = None if n is None else due_at(n, now)
        if at is None or key in self._sending or self._stopping:
            return  # a send under way plans it again when it ends
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(max(0.0, at - now), self._due, key)

    def _due(self, key: str) -> None:
        self._timers.pop(key, None)
        if key not in self._sending:
            self._sending[key] = asyncio.create_task(self._send(key))

    # ---- one delivery ----

    async def _send(self, key: str) -> None:
        try:
            n = self._known.get(key)
            if n is not None:
                async with self._hosts.hold(urlsplit(n.url).netloc), self._slots:
                    await self._attempt(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a delivery's failure must not stop the others
            log.warning("notification %s: attempt failed (%s)", key, exc)
        finally:
            self._sending.pop(key, None)
            self._plan(key)

    async def _attempt(self, key: str) -> None:
        """Claim the record, POST, and store the attempt in it. A claim lost to another
        gateway (or to a newer record) sends nothing: the watch brings the newer one."""
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            return
        n = notification_decoder.decode(entry.value or b"")
        now = time.time()
        at = due_at(n, now)
        if at is None or at > now:  # the watch was behind: planned again from this one
            self._keep(key, n)
            return
        try:
            revision = await self.kv.update(
                key, encode(claimed(n, now, self.policy)), entry.revision
            )
        except KeyWrongLastSequenceError:
            return
        attempt = await self._post(n)
        if attempt is None:
            return
        done = after_attempt(n, attempt, time.time(), self.policy)
        try:
            await self.kv.update(key, encode(done), revision)
        except KeyWrongLastSequenceError:
            return  # removed with its run (retention), or taken once the claim ran out
        self._keep(key, done)
        NOTIFY_ATTEMPTS.labels(OUTCOMES[done.state]).inc()
        event(
            log,
            "notification",
            run=n.run_id,
            index=n.index,
            state=done.state,
            status=attempt.status,
            error=attempt.error,
        )

    async def _post(self, n: Notification) -> NotifyAttempt | None:
        """The attempt made; None if the run is gone (retention removes its deliveries)."""
        assert self._session is not None
        value = await value_of(self.runs, names.run_key(n.run_id))
        if value is None:
            return None
        run = run_record_decoder.decode(value)
        body = summary_body(run, await read_steps(self.runs, run), self.public_url)
        target = run.notify[n.index]
        secret = None
        if target.secret and run.workflow_name is not None:
            key = names.secret_key(run.workflow_name, "notify", str(n.index))
            try:
                stored = await value_of(self.secrets, key)
            except NatsError:
                stored = None
            secret = stored.decode() if stored else None
        return await post(self._session, n, target, body, secret)


class HostLimits:
    """At most ``limit`` sends to one host at once; a host's semaphore is kept only while a
    send to it is under way or waiting, not for every host ever named."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, tuple[asyncio.Semaphore, int]] = {}

    def __len__(self) -> int:
        """The hosts with a send under way or waiting."""
        return len(self._held)

    @asynccontextmanager
    async def hold(self, host: str) -> AsyncIterator[None]:
        sem, users = self._held.get(host) or (asyncio.Semaphore(self.limit), 0)
        self._held[host] = (sem, users + 1)
        try:
            async with sem:
                yield
        finally:
            sem, users = self._held[host]
            if users == 1:
                del self._held[host]
            else:
                self._held[host] = (sem, users - 1)
