"""The store's use, measured and kept within its reserve (docs/storage.md).

Every orchestrator reads the account's stored and reserved bytes and each stream's bytes
every HEDDLE_STORE_CHECK_INTERVAL, and before each scrape, into its metrics. The one
holding partition 0 (which runs the retention too) also keeps the reserve free: when the
store's free room falls below HEDDLE_STORE_RESERVE_BYTES, the oldest messages of
HEDDLE_LOGS are purged until it is free again. Logs are what gives way, because nats-server
refuses every write alike once the store is full, and the writes of the runs under way
(their records, events and outcomes) are the ones Heddle cannot lose. The last reading
also tells the cron scheduler whether a new run may take room (``admits_new_run``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from heddle.shared.broker.nats_types import NatsError
from heddle.shared.broker.store_use import (
    StreamUse,
    purge_oldest,
    read_store_use,
    read_streams,
)
from heddle.shared.core.store_space import (
    StoreUse,
    admits_new_run,
    log_bytes_to_free,
    log_messages_to_keep,
)
from heddle.shared.runtime import metrics
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.service import event
from heddle.shared.wire import names

if TYPE_CHECKING:
    from heddle.shared.broker.nats_types import Client, JetStreamContext
    from heddle.shared.runtime.settings import Settings

log = logging.getLogger("heddle.orchestrator.store")


class StoreKeeper:
    def __init__(self, nc: Client, js: JetStreamContext, settings: Settings) -> None:
        self.nc, self.js, self.settings = nc, js, settings
        self.leading = False  # holds partition 0: purges the logs for room
        self.last: StoreUse | None = None  # the last reading; None until one is made
        self._job = Periodic("store check", settings.store_check_interval, self.check, log)

    def start(self) -> None:
        metrics.before_scrape(self._refresh)
        self._job.start()

    async def stop(self) -> None:
        metrics.forget_before_scrape(self._refresh)
        await self._job.stop()

    def admits_new_run(self) -> bool:
        """Whether the last reading leaves room for a new run beyond the reserve (no
        reading yet: yes, as at the gateway, where the write itself is refused if full)."""
        if self.last is None:
            return True
        return admits_new_run(self.last, self.settings.store_reserve_bytes)

    async def check(self) -> None:
        """Measure; as the leader, purge the oldest logs if the reserve is not free."""
        use, streams = await self.measure()
        if not self.leading:
            return
        to_free = log_bytes_to_free(use, self.settings.store_reserve_bytes)
        logs = next((s for s in streams if s.name == names.LOGS_STREAM), None)
        if to_free <= 0 or logs is None:
            return
        keep = log_messages_to_keep(logs.messages, logs.bytes, to_free)
        if keep >= logs.messages:
            return
        await purge_oldest(self.js, names.LOGS_STREAM, keep)
        metrics.LOGS_PURGED.inc(logs.messages - keep)
        event(
            log,
            "logs purged for room",
            purged=logs.messages - keep,
            used=use.used,
            limit=use.limit,
            reserve=self.settings.store_reserve_bytes,
        )

    async def measure(self) -> tuple[StoreUse, list[StreamUse]]:
        """The store's use and each stream's, into the metrics."""
        use = await read_store_use(
            self.nc, self.settings.store_max_bytes, self.settings.nats_timeout
        )
        streams = await read_streams(self.js)
        self.last = use
        metrics.STORE_USED.set(use.used)
        metrics.STORE_RESERVED.set(use.reserved)
        metrics.STORE_LIMIT.set(use.limit)
        for stream in streams:
            metrics.child(metrics.STREAM_BYTES, stream.name).set(stream.bytes)
            metrics.child(metrics.STREAM_MAX_BYTES, stream.name).set(stream.max_bytes)
        return use, streams

    async def _refresh(self) -> None:
        """Before a scrape: a reading that fails leaves the last one shown."""
        try:
            await self.measure()
        except (NatsError, TimeoutError) as exc:
            log.warning("the store's use could not be read: %s", exc)
