"""Streams and buckets: created on start, unchanged by a second start, changed settings
applied or reported."""

from __future__ import annotations

import asyncio
import os
import signal

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.resources import MIN_API_LEVEL, ensure_resources, require_server
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.errors import ResourceMismatch

from tests.stack import freeze


async def test_resources_are_idempotent_and_follow_settings(nats_server: EmbeddedNats) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        settings = Settings.from_env({}, nats_url=nats_server.url)
        res = await ensure_resources(nc, settings)
        js = res.js
        streams = {s.config.name: s for s in await js.streams_info()}
        assert set(streams) >= {
            names.CMD_STREAM,
            names.STEPS_STREAM,
            names.EVENTS_STREAM,
            names.LOGS_STREAM,
            "KV_heddle-runs",
            "KV_heddle-runners",
        }
        cmd = streams[names.CMD_STREAM].config
        assert cmd.allow_msg_schedules and cmd.storage == "file"
        assert streams[names.STEPS_STREAM].config.retention == "workqueue"
        await js.publish(names.cmd_cancel("r"), b"{}")
        # A second start changes nothing (and keeps the data).
        await ensure_resources(nc, settings)
        again = await js.stream_info(names.CMD_STREAM)
        assert again.state.messages == 1
        assert again.config.__dict__ | {"metadata": None} == cmd.__dict__ | {"metadata": None}
        # A changed setting is applied in place.
        bigger = Settings.from_env({}, nats_url=nats_server.url, log_max_bytes=123_456_789)
        await ensure_resources(nc, bigger)
        assert (await js.stream_info(names.LOGS_STREAM)).config.max_bytes == 123_456_789
        # One that cannot change in place is reported clearly.
        memory = Settings.from_env({}, nats_url=nats_server.url, storage="memory")
        with pytest.raises(
            ResourceMismatch, match="storage is 'file' on the server, settings want 'memory'"
        ):
            await ensure_resources(nc, memory)
        assert await require_server(js) >= MIN_API_LEVEL
    finally:
        await nc.close()


async def test_a_server_too_busy_to_answer_at_start_is_asked_again(
    nats_server: EmbeddedNats,
) -> None:
    """Many services starting at once can keep nats-server from answering in time: a start
    waits it out instead of failing (here the server is stopped past the request timeout)."""
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream(timeout=0.5)
        assert nats_server.proc is not None
        freeze(nats_server.proc.pid)
        try:
            asking = asyncio.create_task(require_server(js))
            await asyncio.sleep(1.5)  # three timeouts
            assert not asking.done()
        finally:
            os.kill(nats_server.proc.pid, signal.SIGCONT)
        assert await asyncio.wait_for(asking, 10) >= MIN_API_LEVEL
    finally:
        await nc.close()
