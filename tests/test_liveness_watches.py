"""The watchdog's view follows the heartbeat watches of the partitions held
(services/orchestrator/liveness.py): no verdict until every watch has replayed, and none
while the connection is down. A watch stopped before it replayed (a partition given back
at once, its take failed) must not hold verdicts back for good."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.orchestrator.liveness import Liveness
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from nats.aio.client import Client


async def until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not in time"
        await asyncio.sleep(0.02)


async def test_a_watch_stopped_before_its_replay_leaves_the_view_to_the_others(
    nats_server: EmbeddedNats, heddle_nc: Client
) -> None:
    settings = Settings.from_env({}, nats_url=nats_server.url)
    liveness = Liveness(settings, await ensure_resources(heddle_nc, settings), {})
    try:
        liveness.watch({0, 1})
        await until(lambda: liveness.view.connected)
        liveness.watch({2})  # a partition taken...
        assert not liveness.view.connected
        await liveness.unwatch({2})  # ...and given back before its watch replayed
        assert liveness.view.connected

        # Offline, a partition given back does not bring verdicts back.
        liveness.disconnected()
        await liveness.unwatch({1})
        assert not liveness.view.connected
        liveness.reconnected()  # the watches replay again, then verdicts resume
        assert not liveness.view.connected
        await until(lambda: liveness.view.connected)
    finally:
        await liveness.stop_watch()
