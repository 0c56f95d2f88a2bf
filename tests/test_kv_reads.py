"""A bucket's replay (shared/kv_reads.py) waits for each message as long as the settings say,
not a fixed time: a broker that freezes in the middle of one fails the read within
HEDDLE_NATS_TIMEOUT."""

from __future__ import annotations

import asyncio
import signal
import time

import nats
import pytest

from services.embedded_nats import EmbeddedNats
from shared import kv_reads, names
from shared.buckets import open_bucket
from shared.resources import ensure_resources
from shared.settings import Settings


async def test_the_buckets_carry_the_nats_timeout(nats_server: EmbeddedNats) -> None:
    settings = Settings(nats_url=nats_server.url, nats_timeout=2.5)
    nc = await nats.connect(nats_server.url)
    try:
        res = await ensure_resources(nc, settings, streams=(), buckets=(names.RUNS_BUCKET,))
        runs = res.kv[names.RUNS_BUCKET]
        assert runs.timeout == 2.5
        for i in range(3):
            await runs.put(f"step.r.s{i}", b"x")
        await runs.delete("step.r.s1")
        entries = await kv_reads.read_current(runs, "step.r.*")
        assert sorted(e.key for e in entries) == ["step.r.s0", "step.r.s2"]
    finally:
        await nc.close()


async def test_a_replay_stalled_by_a_frozen_broker_fails_within_the_buckets_timeout(
    own_nats_server: EmbeddedNats,
) -> None:
    nc = await nats.connect(own_nats_server.url, allow_reconnect=False)
    assert own_nats_server.proc is not None
    try:
        js = nc.jetstream()
        await js.create_key_value(bucket="frozen")
        kv = await open_bucket(nc, js, "frozen", timeout=0.5)
        await kv.put("a", b"1")
        # The replay's consumer exists and counted its key; then the broker stops answering.
        info = await kv_reads._last_per_key_consumer(js, kv.stream, f"{kv.prefix}>")
        queue: asyncio.Queue = asyncio.Queue()
        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=kv_reads._into(queue))
        await nc.flush()
        own_nats_server.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await kv_reads._replay(kv, info.name, inbox, queue, 1)
        assert time.monotonic() - t0 < 3.0  # the bucket's 0.5 s, not the 10 s default
    finally:
        own_nats_server.proc.send_signal(signal.SIGCONT)
        await nc.close()
