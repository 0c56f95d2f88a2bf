"""Attempts that meet a failure around their command (services/runner_agent/attempt.py,
output.py), run in this process against a real nats-server.

A step that ends while its runner's connection is away, its outbound buffer full, still
frees its runner, stops its heartbeats and reports its outcome once the broker is back: the
log's last message that does not fit is dropped, not raised (which left the runner refusing
every offer as busy, for ever, heartbeating). A command that could not be spawned says so
to a kill request at once."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import msgspec
import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.runner_agent import outputs_file
from heddle.services.runner_agent.attempt import Attempt
from heddle.services.runner_agent.attempt_context import AttemptContext
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.resources import ensure_resources
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepFinished, StepReady
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError

from tests.support.outputs_files import no_outputs_directory


def step(command: str) -> StepReady:
    return StepReady(
        run_id="run1",
        step_id="s1",
        attempt=1,
        command=command,
        timeout_seconds=60,
        ready_at="",
        ticket="t1",
    )


def context(nc: Client, acked: AckedPublisher, settings: Settings) -> AttemptContext:
    return AttemptContext(
        runner="r1",
        nc=nc,
        js=nc.jetstream(timeout=3),
        acked=acked,
        settings=settings,
        base_env={"PATH": os.environ["PATH"]},
        heartbeat_ttl=10,
    )


# Far below the services' 64 MiB, so that a few hundred KB of output fill it.
PENDING_SIZE = 4000


@pytest.mark.fault
async def test_a_full_buffer_in_an_outage_neither_wedges_the_runner_nor_loses_the_outcome(
    own_nats_server: EmbeddedNats,
) -> None:
    server = own_nats_server
    settings = Settings.from_env({}, nats_url=server.url, step_user="none", heartbeat_interval=0.3)
    setup = await nats.connect(server.url)
    await ensure_resources(setup, settings)
    await setup.close()

    acked: AckedPublisher | None = None

    async def disconnected() -> None:  # as the runner does
        if acked is not None:
            acked.lost()

    nc = await nats.connect(
        server.url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        pending_size=PENDING_SIZE,
        disconnected_cb=disconnected,
    )
    acked = await AckedPublisher(nc).start()
    ctx = context(nc, acked, settings)
    # Output written once the broker is gone, more than the buffer holds, and a line left
    # without its newline: the log's last message, at the attempt's end, does not fit.
    command = "sleep 1.2; head -c 300000 /dev/zero | tr '\\0' a"
    attempt = Attempt(ctx, step(command))
    freed = asyncio.Event()
    await attempt.start()
    task = asyncio.create_task(attempt.run(free=freed.set))
    try:
        await asyncio.sleep(0.6)  # a heartbeat is stored by now
        server.kill()
        # The command ends in the outage: the runner is free at once, though the outcome
        # waits for the broker.
        await asyncio.wait_for(freed.wait(), 10)
        assert not task.done()
        server.start()
        await asyncio.wait_for(task, 20)  # raises what the attempt raised
        assert attempt.done.is_set()

        check = await nats.connect(server.url)
        try:
            js = check.jetstream()
            subject = names.stored_evt("run1", "s1", "finished", "r1")
            stored = await js.get_last_msg(names.EVENTS_STREAM, subject)
            finished = msgspec.json.decode(stored.data, type=StepFinished)
            assert (finished.outcome, finished.exit_code) == ("succeeded", 0)
            # The heartbeats stopped with the attempt.
            kv = await js.key_value(names.HEARTBEATS_BUCKET)
            key = names.heartbeat_key("run1", "s1", "r1")

            async def last_beat() -> int | None:
                try:
                    return (await kv.get(key)).revision
                except KeyNotFoundError:  # none stored (the last one's went with the broker)
                    return None

            revision = await last_beat()
            await asyncio.sleep(4 * settings.heartbeat_interval)
            assert await last_beat() == revision
        finally:
            await check.close()
    finally:
        attempt.beats.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await nc.close()


async def test_an_attempt_never_spawned_keeps_no_kill_request_waiting(
    nats_server: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its outputs file could not be made (a real mkdtemp under a folder that is gone): the
    runner's kill handler, which waits for a spawn before it kills, must not wait for ever
    (it would hold every later kill of that runner behind it)."""
    no_outputs_directory()
    monkeypatch.setattr(outputs_file, "MEMORY_DIR", str(tmp_path / "gone"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    settings = Settings.from_env({}, nats_url=nats_server.url, step_user="none")
    nc = await nats.connect(nats_server.url)
    try:
        await ensure_resources(nc, settings)
        attempt = Attempt(context(nc, await AckedPublisher(nc).start(), settings), step("true"))
        await attempt.start()
        assert attempt.failure is not None and "outputs file" in attempt.failure
        assert attempt.process is not None
        await asyncio.wait_for(attempt.process.started.wait(), 1)
        attempt.kill("cancelled", "cancel requested")  # nothing to kill: no error either
        await asyncio.wait_for(attempt.run(free=lambda: None), 10)
        assert attempt.done.is_set()
    finally:
        await nc.close()
