"""The cron scheduler on a driven clock against a real nats-server: the `env` fixture (the
buckets, a FakeClock from T0) and what a test reads back from it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.orchestrator.scheduler import Scheduler
from heddle.shared.broker import registry
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.validation import Limits, parse_workflow
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import SubmitRun, command_decoder
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

T0 = datetime(2024, 1, 1, 0, 0, 30, tzinfo=UTC)
MIN = timedelta(minutes=1)


class FakeClock:
    def __init__(self, start: datetime) -> None:
        self.t = start.timestamp()

    def now(self) -> float:
        return self.t

    def of_wall(self, t: float) -> float:
        return t

    def advance(self, delta: timedelta) -> None:
        self.t += delta.total_seconds()


@dataclass
class Env:
    js: JetStreamContext
    workflows: KeyValue
    cron: KeyValue
    clock: FakeClock

    def scheduler(self) -> Scheduler:
        return Scheduler(self.js, self.workflows, self.cron, clock=self.clock, backfill=1000)

    async def register(self, schedule: str = "* * * * *", **extra: Any) -> None:
        doc = {"name": "tick", "schedule": schedule, "steps": [{"id": "a", "command": "true"}]}
        spec = parse_workflow({**doc, **extra}, Limits())
        await registry.register(self.workflows, spec, self.clock.now())

    async def pause(self, paused: bool) -> None:
        await registry.set_paused(self.workflows, "tick", paused, self.clock.now())

    async def submitted(self) -> list[SubmitRun]:
        """Every SubmitRun the schedulers got stored (JetStream dedupes by Nats-Msg-Id)."""
        count = (await self.js.stream_info(names.CMD_STREAM)).state.messages
        sub = await self.js.subscribe(names.CMD_SUBMIT_ALL + ".*", ordered_consumer=True)
        out = [command_decoder.decode((await sub.next_msg(timeout=5)).data) for _ in range(count)]
        await sub.unsubscribe()
        return out

    async def slot_keys(self) -> list[str]:
        entries = await read_current(self.cron, "tick.*")
        return sorted(e.key for e in entries if not e.key.endswith(".cursor"))


@pytest.fixture
async def env(nats_server: EmbeddedNats) -> AsyncIterator[Env]:
    nc = await nats.connect(nats_server.url)
    res = await ensure_resources(nc, Settings.from_env({}, nats_url=nats_server.url))
    yield Env(res.js, res.kv[names.WORKFLOWS_BUCKET], res.kv[names.CRON_BUCKET], FakeClock(T0))
    await nc.close()
