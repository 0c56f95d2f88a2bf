"""A background job run every ``interval`` seconds until stopped: the cron tick, the
retention sweep. A failed round is logged and the next one runs as usual."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from heddle.shared.runtime.tasks import cancel_and_wait


class Periodic:
    def __init__(
        self, name: str, interval: float, job: Callable[[], Awaitable[object]], log: logging.Logger
    ) -> None:
        self.name = name
        self.interval = interval
        self.job = job
        self.log = log
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.job()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one bad round must not end the job
                self.log.warning("%s failed: %s", self.name, exc)
            await asyncio.sleep(self.interval)
