"""A run actor's group commit, against a real nats-server: messages that queued up while the
actor was busy are decided together and their writes stored as one pipeline, each record
once, in its final state, with every transition still logged."""

from __future__ import annotations

import asyncio
import logging

import nats
import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.decisions import PersistRun
from heddle.services.orchestrator.effects import EffectRunner
from heddle.services.orchestrator.messages import Create
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.resources import ensure_resources, stream_configs
from heddle.shared.broker.streams import ensure_stream
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepSpec, StepStarted, SubmitRun, encode
from heddle.shared.wire.timefmt import from_epoch
from nats.aio.client import Client
from nats.js.api import ConsumerConfig
from nats.js.errors import KeyWrongLastSequenceError

from tests.support.run_records import T0, finished, record, writes


@pytest.fixture
def nc(heddle_nc: Client) -> Client:
    return heddle_nc


async def new_run(nc: Client, steps: list[StepSpec]) -> RunActor:
    cmd = SubmitRun(run_id="gc", submitted_at=from_epoch(T0), steps=steps)
    # No tickets (as a run stored before them): these events are the runners' own.
    state, effects = RunState.new(cmd, Policy(), T0, tickets=lambda: "")
    runner = EffectRunner(nc, nc.jetstream(), await AckedPublisher(nc).start())
    await runner.apply("gc", effects, create_run=True)
    return RunActor(state, runner, on_done=lambda actor: None)


def started(step: str, runner: str = "r1") -> StepStarted:
    return StepStarted(
        run_id="gc", step_id=step, attempt=1, runner=runner, pid=42, started_at=from_epoch(T0)
    )


def transitions(caplog: pytest.LogCaptureFixture, step: str) -> list[tuple[str, str]]:
    return [
        (r.fields["was"], r.fields["status"])
        for r in caplog.records
        if r.getMessage() == "step" and r.fields["step"] == step
    ]


async def test_queued_messages_are_stored_together_each_record_once(
    nc: Client, caplog: pytest.LogCaptureFixture
) -> None:
    actor = await new_run(
        nc, [StepSpec(id="a", command="true"), StepSpec(id="b", command="true", depends_on=["a"])]
    )
    before = await writes(nc)
    caplog.set_level(logging.INFO, logger="heddle.orchestrator")
    # Both arrive before the actor runs: one batch, so a's running record is never written.
    actor.post(started("a"))
    actor.post(finished("a"))
    actor.start()
    await actor.drain()
    assert await writes(nc) - before == 2  # a, once, in its final state; b, now queued
    a = await record(nc, names.step_key("gc", "a"))
    assert (a["status"], a["runner"], a["exitCode"]) == ("succeeded", "r1", 0)
    assert a["startedAt"] == from_epoch(T0)
    assert (await record(nc, names.step_key("gc", "b")))["status"] == "queued"
    # Every transition is still logged, as it was decided.
    assert transitions(caplog, "a") == [("queued", "running"), ("running", "succeeded")]
    assert transitions(caplog, "b") == [("pending", "queued")]
    await actor.stop()


async def test_a_message_alone_is_stored_alone(nc: Client) -> None:
    actor = await new_run(nc, [StepSpec(id="a", command="true")])
    actor.start()
    before = await writes(nc)
    actor.post(started("a"))
    await actor.drain()
    assert await writes(nc) - before == 1
    assert (await record(nc, names.step_key("gc", "a")))["status"] == "running"
    actor.post(finished("a"))
    await actor.drain()
    assert await writes(nc) - before == 3  # the step, then the run: succeeded
    assert (await record(nc, names.run_key("gc")))["status"] == "succeeded"
    await actor.stop()


async def test_storing_a_run_that_exists_is_a_conflict_not_retried(nc: Client) -> None:
    """A submit delivered again after its run was stored: the run record's
    compare-and-set refuses it at once, and nothing of the stored run changes."""
    await new_run(nc, [StepSpec(id="a", command="true")])
    stored = await writes(nc)
    cmd = SubmitRun(run_id="gc", submitted_at=from_epoch(T0 + 5), steps=[])
    _, effects = RunState.new(cmd, Policy(), T0 + 5)
    runner = EffectRunner(nc, nc.jetstream(), await AckedPublisher(nc).start())
    with pytest.raises(KeyWrongLastSequenceError):
        await asyncio.wait_for(runner.apply("gc", effects, create_run=True), 5)
    assert await writes(nc) == stored
    assert (await record(nc, names.run_key("gc")))["stepCount"] == 1


async def test_a_run_record_stored_by_an_earlier_try_is_not_a_conflict(nc: Client) -> None:
    """A try whose run record was stored but whose answer was lost (its server gone in
    between), then a try that failed: the next one finds the record, byte for byte the one
    it writes, and goes on instead of taking it for another submit's run."""
    js = nc.jetstream()
    cmd = SubmitRun(
        run_id="gc", submitted_at=from_epoch(T0), steps=[StepSpec(id="a", command="true")]
    )
    _, effects = RunState.new(cmd, Policy(), T0)
    run = next(e.run for e in effects if isinstance(e, PersistRun))
    kv = await js.key_value(names.RUNS_BUCKET)
    await kv.create(names.run_key("gc"), encode(run))  # what the lost answer was about
    await js.delete_stream(names.STEPS_STREAM)  # the ready message has nowhere to go
    runner = EffectRunner(nc, js, await AckedPublisher(nc).start())
    applying = asyncio.create_task(runner.apply("gc", effects, create_run=True))
    await asyncio.sleep(0.5)  # a try or two failed on the ready message
    assert not applying.done()
    await ensure_stream(js, stream_configs(Settings())[names.STEPS_STREAM])
    await asyncio.wait_for(applying, 10)
    assert (await record(nc, names.step_key("gc", "a")))["status"] == "queued"
    ready = await js.get_last_msg(names.STEPS_STREAM, names.step_ready("gc", "a", opens=True))
    assert ready.data


async def test_a_stored_run_that_cannot_be_read_is_not_taken_for_another(
    nats_server: EmbeddedNats, caplog: pytest.LogCaptureFixture
) -> None:
    """Whose the stored record is, read after a try whose answer was lost (here: a try that
    failed, then the record found stored): another submit's, and the writes end as a
    conflict; not known, the read failing, and the writes are tried again rather than leave
    the run to no actor. Its own record is the test above."""
    nc = await nats.connect(nats_server.url)
    await ensure_resources(nc, Settings(nats_url=nats_server.url))
    js = nc.jetstream()
    steps = [StepSpec(id="a", command="true")]
    _, effects = RunState.new(
        SubmitRun(run_id="gc", submitted_at=from_epoch(T0), steps=steps), Policy(), T0
    )
    another = SubmitRun(run_id="gc", submitted_at=from_epoch(T0 + 1), steps=steps)
    _, others = RunState.new(another, Policy(), T0 + 1)
    run = next(e.run for e in others if isinstance(e, PersistRun))
    await (await js.key_value(names.RUNS_BUCKET)).create(names.run_key("gc"), encode(run))

    async def tried_after_a_failure(runner: EffectRunner) -> asyncio.Task[None]:
        """Applying the new run's effects: a first try fails (its ready message has nowhere
        to go), and the tries after it, with the stream back, meet the stored record."""
        await js.delete_stream(names.STEPS_STREAM)
        applying = asyncio.create_task(runner.apply("gc", effects, create_run=True))
        await asyncio.sleep(0.5)
        assert not applying.done()
        await ensure_stream(js, stream_configs(Settings())[names.STEPS_STREAM])
        return applying

    conflicting = await tried_after_a_failure(
        EffectRunner(nc, js, await AckedPublisher(nc).start())
    )
    with pytest.raises(KeyWrongLastSequenceError):
        await asyncio.wait_for(conflicting, 10)
    # Reads through a connection that is gone: every one fails, whose the record is is not
    # known, and the writes go on being tried.
    gone = await nats.connect(nats_server.url)
    await gone.close()
    unread = EffectRunner(nc, gone.jetstream(), await AckedPublisher(nc).start())
    caplog.set_level(logging.WARNING, logger="heddle.orchestrator")
    not_known = await tried_after_a_failure(unread)
    await asyncio.sleep(1.5)  # a few tries, each meeting the record it cannot read
    assert not not_known.done()
    conflicts = [r for r in caplog.records if "wrong last sequence" in r.getMessage()]
    assert conflicts, [r.getMessage() for r in caplog.records]
    not_known.cancel()
    await asyncio.gather(not_known, return_exceptions=True)
    await nc.close()


async def test_a_submit_found_stored_while_creating_leaves_a_duplicate(nc: Client) -> None:
    """Another delivery of the submit stored the run between the check and the write: the
    actor ends as a duplicate (the run's own actor is elsewhere), not as a run that waits
    for messages forever."""
    await new_run(nc, [StepSpec(id="a", command="true")])
    cmd = SubmitRun(run_id="gc", submitted_at=from_epoch(T0), steps=[])
    state, effects = RunState.new(cmd, Policy(), T0)
    runner = EffectRunner(nc, nc.jetstream(), await AckedPublisher(nc).start())
    ended: list[RunActor] = []
    announced: list[str] = []

    async def announce(run_id: str) -> None:
        announced.append(run_id)

    async def absent(run_id: str) -> bool:
        return False  # as read a moment before it was stored

    actor = RunActor(state, runner, on_done=ended.append)
    actor.post(Create(effects, announce, absent))
    actor.start()
    await asyncio.wait_for(actor.drain(), 10)
    assert ended == [actor] and actor.duplicate
    assert announced == ["gc"]


async def test_a_run_whose_creation_failed_is_forgotten_for_its_submit_s_next_delivery(
    nc: Client,
) -> None:
    """Its submit is asked for again: a new actor must create the run, so this one leaves
    the table of live runs first instead of holding the run id with nothing stored."""
    cmd = SubmitRun(run_id="gc", submitted_at=from_epoch(T0), steps=[])
    state, effects = RunState.new(cmd, Policy(), T0)
    runner = EffectRunner(nc, nc.jetstream(), await AckedPublisher(nc).start())
    ended: list[RunActor] = []

    async def announce(run_id: str) -> None:
        raise AssertionError("a run not stored is not announced")

    async def absent(run_id: str) -> bool:
        raise RuntimeError("the existence check failed")

    actor = RunActor(state, runner, on_done=ended.append)
    actor.post(Create(effects, announce, absent))
    actor.start()
    await asyncio.wait_for(actor.drain(), 10)
    assert ended == [actor] and actor.discarded and not actor.duplicate
    await actor.stop()


async def test_messages_behind_a_creation_that_failed_go_back_at_once(nc: Client) -> None:
    """An event posted to the actor while its run was being created, the creation failed:
    the event is asked for again now (a nak), not after its acknowledgement wait (60 s in
    the orchestrator's consumers; 30 s here)."""
    js = nc.jetstream()
    await js.add_stream(name="BEHIND", subjects=["behind.>"])
    sub = await js.pull_subscribe("behind.x", "behind", config=ConsumerConfig(ack_wait=30))
    await js.publish("behind.x", b"an event")
    [held] = await sub.fetch(1, timeout=5)
    cmd = SubmitRun(run_id="gc", submitted_at=from_epoch(T0), steps=[])
    state, effects = RunState.new(cmd, Policy(), T0)
    runner = EffectRunner(nc, js, await AckedPublisher(nc).start())

    async def announce(run_id: str) -> None:
        raise AssertionError("a run not stored is not announced")

    async def absent(run_id: str) -> bool:
        raise RuntimeError("the existence check failed")

    actor = RunActor(state, runner, on_done=lambda actor: None)
    actor.post(Create(effects, announce, absent))
    actor.post(finished("a"), held)
    actor.start()
    await asyncio.wait_for(actor.drain(), 10)
    assert actor.discarded
    [again] = await sub.fetch(1, timeout=3)
    assert (again.data, again.metadata.num_delivered) == (b"an event", 2)
    await again.ack()
    await actor.stop()


async def test_a_run_stored_and_not_announced_goes_on(nc: Client) -> None:
    """The announcement failed (a connection that would not take it) once the run record
    was stored: the run is committed, so its actor lives on and handles its events, where
    a discarded one would leave a stored run no actor ever moves."""
    cmd = SubmitRun(
        run_id="gc", submitted_at=from_epoch(T0), steps=[StepSpec(id="a", command="true")]
    )
    state, effects = RunState.new(cmd, Policy(), T0, tickets=lambda: "")
    runner = EffectRunner(nc, nc.jetstream(), await AckedPublisher(nc).start())
    ended: list[RunActor] = []

    async def announce(run_id: str) -> None:
        raise RuntimeError("the announcement failed")

    async def absent(run_id: str) -> bool:
        return False

    actor = RunActor(state, runner, on_done=ended.append)
    actor.post(Create(effects, announce, absent))
    actor.start()
    await asyncio.wait_for(actor.drain(), 10)
    assert not actor.discarded and ended == []
    actor.post(finished("a"))
    await asyncio.wait_for(actor.drain(), 10)
    assert (await record(nc, names.run_key("gc")))["status"] == "succeeded"
    assert ended == [actor]
