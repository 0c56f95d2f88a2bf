"""Reading a bucket's current values (shared/broker/kv_reads.py): a few keys in one batched direct
get, more (or a bucket without direct gets) in one replay, which waits for each message as
long as the settings say: a broker that freezes in the middle of one fails the read within
HEDDLE_NATS_TIMEOUT."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker import kv_reads
from heddle.shared.broker.buckets import Bucket, open_bucket
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, StepRecord, encode
from nats.aio.client import Client

from tests.stack import freeze


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
        freeze(own_nats_server.proc.pid)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await kv_reads._replay(kv, info.name, inbox, queue, 1)
        assert time.monotonic() - t0 < 3.0  # the bucket's 0.5 s, not the 10 s default
    finally:
        own_nats_server.proc.send_signal(signal.SIGCONT)
        await nc.close()


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.close()


async def test_a_few_keys_are_read_in_one_batched_get_without_a_consumer(nc: Client) -> None:
    js = nc.jetstream()
    await js.create_key_value(bucket="few", direct=True)
    kv = await open_bucket(nc, js, "few", timeout=2)
    for i in range(4):
        await kv.put(f"step.r.s{i}", b"v%d" % i)
    await kv.put("step.r.s1", b"again")
    await kv.put("step.other.s0", b"not this run")
    await kv.delete("step.r.s2")
    entries = await kv_reads.last_values(kv, "step.r.*", timeout=2)
    assert sorted((e.key, e.value) for e in entries) == [
        ("step.r.s0", b"v0"),
        ("step.r.s1", b"again"),
        ("step.r.s3", b"v3"),
    ]
    again = next(e for e in entries if e.key == "step.r.s1")
    assert again.revision == 5 and kv_reads.stored_at(again) is not None
    assert await kv_reads.last_values(kv, "nothing.*", timeout=2) == []
    # read_current takes the same path: no consumer was made on the server for it.
    assert sorted(e.key for e in await kv_reads.read_current(kv, "step.r.*")) == [
        "step.r.s0",
        "step.r.s1",
        "step.r.s3",
    ]
    assert (await js.stream_info(kv.stream)).state.consumer_count == 0


async def test_more_keys_than_one_batched_get_answers_are_replayed(nc: Client) -> None:
    js = nc.jetstream()
    await js.create_key_value(bucket="many", direct=True)
    kv = await open_bucket(nc, js, "many", timeout=2)
    count = kv_reads.MULTI_LAST_MAX + 6
    for i in range(count):
        await nc.publish(names.kv_subject("many", f"k.{i}"), b"%d" % i)
    await kv.put("k.last", b"acknowledged")  # every earlier put is stored before it
    with pytest.raises(kv_reads.TooMany):
        await kv_reads.last_values(kv, "k.*", timeout=2)
    entries = await kv_reads.read_current(kv, "k.*")
    assert len(entries) == count + 1
    assert {e.key: e.value for e in entries}["k.7"] == b"7"


async def test_a_bucket_without_direct_gets_or_with_replicas_is_replayed(nc: Client) -> None:
    js = nc.jetstream()
    await js.create_key_value(bucket="plain")
    kv = await open_bucket(nc, js, "plain", timeout=2)
    assert not kv.direct and not kv.batched
    await kv.put("a", b"1")
    assert [(e.key, e.value) for e in await kv_reads.read_current(kv, ">")] == [("a", b"1")]
    # Replicated, a bucket is read from its leader: a follower may lag.
    assert not Bucket(nc, js, "plain", direct=True, replicas=3).batched
    assert Bucket(nc, js, "plain", direct=True, replicas=1).batched


@pytest.mark.parametrize("direct", [True, False], ids=["batched", "replayed"])
async def test_a_run_and_its_steps_are_read_as_one_snapshot(nc: Client, direct: bool) -> None:
    js = nc.jetstream()
    bucket = f"snap-{direct}".lower()
    await js.create_key_value(bucket=bucket, direct=direct)
    kv = await open_bucket(nc, js, bucket, timeout=2)
    assert kv.batched is direct
    assert await kv_reads.read_run_and_steps(kv, "r") == (None, [])
    steps = [StepRecord(id=s, command="true", index=i) for i, s in enumerate("cab")]
    for step in steps:
        await kv.put(names.step_key("r", step.id), encode(step))
    await kv.put(names.step_key("other", "a"), encode(steps[0]))
    await kv.put(
        names.run_key("rr"),
        encode(RunRecord(run_id="rr", status="failed", created_at="t", step_count=0)),
    )
    run = RunRecord(run_id="r", status="succeeded", created_at="t", step_count=3)
    await kv.put(names.run_key("r"), encode(run))
    got_run, got_steps = await kv_reads.read_run_and_steps(kv, "r")
    assert got_run == run
    assert [s.id for s in got_steps] == ["c", "a", "b"]  # in document order
