"""A continuous pull consumer: messages are handled the moment they arrive.

nats-py's ``fetch(n)`` waits, once the stream was empty, until ``n`` messages came or the
timeout passed, which puts up to a whole timeout on the critical path. This adapter keeps
pull requests outstanding instead (as the Go client's ``Consume`` does) and hands each
message to the handler as it is delivered, then settles the handler's outcome
(``shared/broker/consume.py``). ``credit`` bounds how many are requested: the
orchestrator keeps a large credit; the dispatcher asks for as many as it has free runners.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from heddle.shared.broker.consume import Outcome, settle
from heddle.shared.broker.jetstream_api import request_next
from heddle.shared.runtime.tasks import cancel_and_wait
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.subscription import Subscription

log = logging.getLogger("heddle.pull")

Handler = Callable[[Msg], Awaitable[Outcome]]


class ContinuousPull:
    def __init__(
        self,
        nc: Client,
        stream: str,
        durable: str,
        handler: Handler,
        credit: int = 256,
        expires: float = 5.0,
    ) -> None:
        self.nc = nc
        self.stream = stream
        self.durable = durable
        self.handler = handler
        self.credit = credit
        self.at_least = 1  # the smallest request worth its message (set_credit)
        self.expires = expires
        self.outstanding = 0
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None  # from start()
        self._refresh: asyncio.Task | None = None
        self._last_sent = 0.0
        self._closed = False

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(self._inbox, cb=self._on_msg)
        await self.top_up()
        self._refresh = asyncio.create_task(self._refresh_loop())

    async def pause(self) -> None:
        """Ask for nothing more; what the requests already out bring is still handled."""
        self._closed = True
        await cancel_and_wait(self._refresh)

    async def stop(self) -> None:
        await self.pause()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    def set_credit(self, credit: int, at_least: int = 1) -> None:
        """Ask for up to ``credit`` messages, ``at_least`` of them in each request: a
        consumer that can wait asks for several at a time, not one per message handled.
        Nothing is asked while the credit stays under ``at_least``."""
        self.credit = max(credit, 0)
        self.at_least = max(at_least, 1)

    async def top_up(self) -> None:
        """Ask for more when less than half the credit is outstanding and at least
        ``at_least`` can be asked for."""
        want = self.credit - self.outstanding
        if self._closed or want < self.at_least or (self.outstanding and want < self.credit // 2):
            return
        self.outstanding += want
        self._last_sent = time.monotonic()
        try:
            await request_next(self.nc, self.stream, self.durable, self._inbox, want, self.expires)
        except NatsError as exc:  # the connection closed or its buffer full: asked again
            self.outstanding -= want
            log.debug("pull request failed: %s", exc)

    def reset(self) -> None:
        """After a reconnect the server may have forgotten our requests: start afresh."""
        self.outstanding = 0

    async def _on_msg(self, msg: Msg) -> None:
        headers = msg.headers
        if headers and not msg.data and (status := headers.get("Status")) is not None:
            if status in ("408", "409"):
                left = headers.get("Nats-Pending-Messages")
                self.outstanding = max(self.outstanding - int(left or 0), 0)
                if not left:
                    self.outstanding = 0
            await self.top_up()
            return
        self.outstanding = max(self.outstanding - 1, 0)
        try:
            outcome = await self.handler(msg)
        except Exception:  # a handler's bug: the message comes back, the consumer goes on
            log.exception("handler failed for %s", msg.subject)
            outcome = Outcome.FAILED
        await settle(msg, outcome)
        await self.top_up()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.expires / 2)
            # Requests expire after ``expires``; replace them before they do.
            if time.monotonic() - self._last_sent >= self.expires * 0.9:
                self.outstanding = 0
            await self.top_up()
