"""The partitions of the runs on a real server: the streams store each command and event
with its run's partition (the same one shared/core/partitions.py computes), a partition's count
cannot change under stored messages, and a consumer reset delivers again at once what a
dead holder left unacknowledged."""

from __future__ import annotations

import asyncio

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.jetstream_api import reset_consumer
from heddle.shared.broker.kv_reads import read_current
from heddle.shared.broker.nats_io import close
from heddle.shared.broker.nats_types import AckPolicy, ConsumerConfig
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.core.partitions import partition_of, subject_partition
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.errors import ResourceMismatch


async def test_stored_subjects_carry_the_partition_partition_of_computes(
    nats_server: EmbeddedNats,
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        res = await ensure_resources(nc, Settings.from_env({}, partitions=7))
        runs = [f"run-{i}" for i in range(200)] + ["a", "Z_9", "x" * 64]
        hb = names.HEARTBEATS_BUCKET
        for run in runs:
            await res.js.publish(names.cmd_submit(run), b"{}")
            await res.js.publish(names.evt(run, "s", "finished", "runner-0"), b"{}")
            await res.js.publish(names.kv_subject(hb, names.heartbeat_key(run, "s", "r0")), b"1")
        for stream, pattern in ((names.CMD_STREAM, ">"), (names.EVENTS_STREAM, ">")):
            info = await res.js.stream_info(stream, subjects_filter=pattern)
            stored = info.state.subjects or {}
            assert len(stored) == len(runs)
            for subject in stored:
                run = (
                    names.command_run(subject)
                    if stream == names.CMD_STREAM
                    else subject.split(".")[2]
                )
                assert subject_partition(subject) == partition_of(run, 7), subject
        # Heartbeats too, and a partition's watch sees its runs' alone.
        kv = res.kv[hb]
        keys = [e.key for e in await read_current(kv, names.heartbeats_of_partition(3))]
        assert sorted(k.split(".")[0] for k in keys) == sorted(
            r for r in runs if partition_of(r, 7) == 3
        )
        assert all(k.endswith(".3") for k in keys)
        # A partition's consumer filter takes that partition's runs alone.
        info = await res.js.stream_info(
            names.EVENTS_STREAM, subjects_filter=names.evt_of_partition(3)
        )
        assert {s.split(".")[2] for s in info.state.subjects or {}} == {
            r for r in runs if partition_of(r, 7) == 3
        }
        # The count is fixed once messages are stored in partitions.
        with pytest.raises(ResourceMismatch, match="subject_transform"):
            await ensure_resources(nc, Settings.from_env({}, partitions=8))
    finally:
        await close(nc)


async def test_a_reset_consumer_delivers_again_what_was_left_unacknowledged(
    nats_server: EmbeddedNats,
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        res = await ensure_resources(nc, Settings.from_env({}))
        for i in range(3):
            await res.js.publish(names.cmd_cancel(f"r{i}"), b"{}")
        durable = "test-reset"
        await res.js.add_consumer(
            names.CMD_STREAM,
            ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=60),
        )
        sub = await res.js.pull_subscribe_bind(durable, stream=names.CMD_STREAM)
        first = await sub.fetch(3, timeout=2)
        await first[0].ack()
        # Nothing comes back within the ack wait without a reset ...
        with pytest.raises(asyncio.TimeoutError):
            await sub.fetch(1, timeout=0.5)
        assert await reset_consumer(nc, names.CMD_STREAM, durable) == 2
        again = await sub.fetch(2, timeout=2)
        assert [m.subject for m in again] == [m.subject for m in first[1:]]
    finally:
        await close(nc)
