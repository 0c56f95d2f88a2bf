"""services/gateway/reads/run_index.py: the runs list's index kept by a real nats-server's consumer
(RunIndex): built from the records there, updated as they change, caught up to each request.
The index itself (RunList), without I/O: tests/unit/gateway/test_run_index.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from heddle.services.gateway.reads.run_index import RunIndex
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.shared.broker.buckets import open_bucket
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, encode
from nats.aio.client import Client

from tests.support.stack import REPO


@pytest.fixture
def nc(heddle_nc: Client) -> Client:
    return heddle_nc


def run(run_id: str, minute: int, status: str = "running") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        status=status,  # type: ignore[arg-type]
        created_at=f"2026-11-30T08:{minute:02d}:00.000Z",
        step_count=1,
    )


def ids(runs: list[RunRecord]) -> list[str]:
    return [r.run_id for r in runs]


async def test_the_index_follows_the_records_and_is_caught_up_to_each_request(
    nc: Client,
) -> None:
    js = nc.jetstream()
    kv = await open_bucket(nc, js, names.RUNS_BUCKET)
    for i in range(50):
        await kv.put(names.run_key(f"old{i:02d}"), encode(run(f"old{i:02d}", i % 60)))
    await kv.put(names.step_key("old00", "a"), b"{}")  # not a run record: not indexed
    index = RunIndex(js, kv)
    index.start()
    try:
        runs = await index.caught_up()
        assert runs.total == 50 and ids(runs.newest(1)) == ["old49"]
        # Written just before each request: in the answer, without waiting by the caller.
        await kv.put(names.run_key("new"), encode(run("new", 59)))
        assert ids((await index.caught_up()).newest(1)) == ["new"]
        await kv.put(names.run_key("new"), encode(run("new", 59, "succeeded")))
        runs = await index.caught_up()
        assert runs.matching("succeeded") == 1 and runs.total == 51
        await kv.delete(names.run_key("old49"))
        await kv.purge(names.run_key("old48"))
        runs = await index.caught_up()
        assert runs.total == 49 and "old49" not in ids(runs.newest(100))
        assert "old48" not in ids(runs.newest(100))
    finally:
        await index.stop()


WRITER = """
import asyncio, sys
import nats
from heddle.shared.wire import names
from heddle.shared.wire.contracts import RunRecord, encode

async def main():
    nc = await nats.connect(sys.argv[1])
    js = nc.jetstream()
    acks = [
        await js.publish_async(
            names.kv_subject(names.RUNS_BUCKET, names.run_key(f"b{i:04d}")),
            encode(RunRecord(run_id=f"b{i:04d}", status="running",
                             created_at="2026-11-30T08:00:00.000Z", step_count=1)),
        )
        for i in range(1000)
    ]
    await asyncio.gather(*acks)
    await nc.close()

asyncio.run(main())
"""


async def test_a_burst_written_elsewhere_is_all_in_the_next_answer(
    nc: Client, nats_server: EmbeddedNats
) -> None:
    js = nc.jetstream()
    index = RunIndex(js, await open_bucket(nc, js, names.RUNS_BUCKET))
    index.start()
    try:
        assert (await index.caught_up()).total == 0
        # Another process writes them (as the orchestrator does) while this one's event
        # loop is blocked: none of them has reached the index when the request comes.
        subprocess.run(
            [sys.executable, "-c", WRITER, nats_server.url], check=True, cwd=REPO, timeout=60
        )
        runs = await index.caught_up()
        assert runs.total == 1000 and runs.matching("running") == 1000
    finally:
        await index.stop()
