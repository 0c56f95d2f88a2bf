"""A runner's entry in heddle-runners: who it is, whether it is busy, and with what.

Written (acknowledged) at start and after a reconnect, refreshed every
``HEDDLE_REGISTRY_INTERVAL`` with a per-key TTL (so a runner that dies leaves the pool when
the entry expires), and shortly after each status change. Changes within
``REGISTRY_COALESCE`` share one write, without waiting for its acknowledgement: short steps
cost no registry write each, because the registry is for people (``GET /api/runners``) and
for a dispatcher that restarts, while live leases follow the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from heddle.shared.runtime.tasks import cancel_and_wait
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunnerInfo, encode

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, JetStreamContext

log = logging.getLogger("heddle.runner")
REGISTRY_COALESCE = 0.1  # seconds


class Registration:
    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        runner: str,
        ttl: float,
        interval: float,
        info: Callable[[], RunnerInfo],
    ) -> None:
        self._nc = nc
        self._js = js
        self._subject = names.kv_subject(names.RUNNERS_BUCKET, runner)
        self._runner = runner
        self._ttl = int(max(1, ttl))
        self._interval = interval
        self._info = info
        self._refreshing: asyncio.Task | None = None
        self._pending: asyncio.Task | None = None

    async def write(self) -> None:
        """Write the entry now and wait until it is stored."""
        await self._js.publish(self._subject, encode(self._info()), msg_ttl=self._ttl)

    def start_refreshing(self) -> None:
        self._refreshing = asyncio.create_task(self._refresh_loop(), name="registry")

    def soon(self) -> None:
        """Show a status change shortly (coalesced with others in the same window)."""
        if self._pending is None or self._pending.done():
            self._pending = asyncio.create_task(self._write_later())

    async def stop(self, remove: bool) -> None:
        """Stop writing; with ``remove``, delete the entry (the runner leaves the pool now
        rather than when its TTL runs out)."""
        await cancel_and_wait(self._refreshing, self._pending)
        if remove:
            with contextlib.suppress(Exception):
                kv = await self._js.key_value(names.RUNNERS_BUCKET)
                await kv.delete(self._runner)

    async def _write_later(self) -> None:
        await asyncio.sleep(REGISTRY_COALESCE)
        with contextlib.suppress(Exception):
            # Unacknowledged: if it is lost, the next refresh says the same.
            await self._nc.publish(
                self._subject, encode(self._info()), headers={"Nats-TTL": str(self._ttl)}
            )

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.write()
            except Exception as exc:  # the loop outlives any failure: a dead one drops the entry
                log.warning("registry refresh failed: %s", exc)
