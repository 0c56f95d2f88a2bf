"""How many steps of one run may be queued or running at once (docs/pools.md, "Fair
turns"): HEDDLE_RUN_WINDOW if set, else eight times the runners in the registry, counted every
HEDDLE_REGISTRY_INTERVAL. Eight times: a run alone keeps every runner busy however far the
orchestrator's decisions lag behind the runners (a narrower window makes small runs' turns
come sooner, and slowed a lone fan-out measurably: docs/performance.md, "Pools, semaphores
and fair turns")."""

from __future__ import annotations

import logging

from heddle.shared.broker.kv_reads import count_keys
from heddle.shared.broker.nats_types import JetStreamContext, NatsError
from heddle.shared.runtime.periodic import Periodic
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names

log = logging.getLogger("heddle.orchestrator")
# Below this the window would serialise a run on a pool still registering.
MIN_WINDOW = 8
RUNNERS_TIMES = 8


class RunWindow:
    def __init__(self, settings: Settings, js: JetStreamContext) -> None:
        self.js = js
        self.fixed = settings.run_window
        self.size = self.fixed or MIN_WINDOW
        self._periodic = Periodic("run window", settings.registry_interval, self.count, log)

    def __call__(self) -> int:
        return self.size

    async def start(self) -> None:
        if not self.fixed:
            await self.count()
            self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def count(self) -> None:
        try:
            runners = await count_keys(self.js, names.RUNNERS_BUCKET, ">")
        except (NatsError, TimeoutError) as exc:
            log.debug("runners not counted: %s", exc)
            return
        self.size = max(MIN_WINDOW, RUNNERS_TIMES * runners)
