"""Many clients following steps' logs at once leave no consumer behind on the server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import nats
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.buckets import open_bucket
from heddle.shared.wire import names
from heddle.shared.wire.contracts import LogLine, encode

from tests.support.gateway_apps import Gateway, bearer, root
from tests.support.gateway_apps import admin_file as admin_file  # fixtures
from tests.support.gateway_apps import gateway as gateway
from tests.support.run_events import parse, records


async def test_log_followers_leave_no_consumer_behind(
    nats_server: EmbeddedNats, gateway: Gateway, admin_file: Path
) -> None:
    """60 follows of finished steps' logs: each gets the lines and the end, and once they
    are done the logs stream has no consumer left."""
    client = await gateway()
    nc = await nats.connect(nats_server.url)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    try:
        js = nc.jetstream()
        runs = await open_bucket(nc, js, names.RUNS_BUCKET)
        ids = [f"logged-{i}" for i in range(60)]
        for run_id in ids:
            for key, value in records(run_id, "succeeded", "succeeded").items():
                await runs.put(key, value)
            for n in (1, 2):
                line = LogLine(stream="stdout", seq=n, text=f"{run_id} line {n}")
                await js.publish(names.log(run_id, "a", 1, "default", "r"), encode(line))
        before = (await js.stream_info(names.LOGS_STREAM)).state.consumer_count

        async def follow(run_id: str) -> list[str]:
            url = client.make_url(f"/api/runs/{run_id}/steps/a/logs?follow=1")
            async with session.get(url, headers=bearer(root(admin_file))) as resp:
                got = await parse(resp, 30, lambda _: None)
            return [data["text"] for _, data in got if "text" in data]

        texts = await asyncio.gather(*(follow(r) for r in ids))
        assert texts == [[f"{r} line 1", f"{r} line 2"] for r in ids]
        # Deleted as each follow ends: an ordered consumer left to itself lingers for its
        # inactivity threshold (5 s or more).
        deadline = time.monotonic() + 3
        while (await js.stream_info(names.LOGS_STREAM)).state.consumer_count > before:
            assert time.monotonic() < deadline, "the followers' consumers are still there"
            await asyncio.sleep(0.1)
        assert before == 0
    finally:
        await session.close()
        await nc.close()
