"""Before the watchdog fails a silent attempt it reads whether the attempt's outcome is
stored (a runner that reported, then went quiet, with its outcome still in this service's
backlog). Against a real nats-server: a stored outcome wins over the verdict, none gives
the verdict, and an outcome that cannot be read (the server gone, as just after a broker
crash) postpones the verdict to a later scan instead of failing a step that succeeded. The
backstop's look, about to queue a lost attempt again, postpones the same way."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from heddle.services.local.embedded_nats import EmbeddedNats
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.backstop import Backstop
from heddle.services.orchestrator.effects import EffectRunner
from heddle.services.orchestrator.liveness import Liveness
from heddle.services.orchestrator.messages import Lost, Silent
from heddle.services.orchestrator.state import Policy, RunState
from heddle.services.orchestrator.stored import ready_steps
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.resources import Resources
from heddle.shared.broker.stored_events import last_outcome
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import Heartbeat, StepFinished, StepSpec, SubmitRun, encode
from heddle.shared.wire.errors import OutcomeUnknown
from heddle.shared.wire.timefmt import from_epoch
from nats.aio.client import Client
from nats.js import JetStreamContext

T0 = 1_800_000_000.0
RUN = "quiet"


class PostedTo(RunActor):
    """A run actor that is never started and keeps what is posted to it, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[object] = []

    def post(self, message: object, msg: object = None) -> None:
        self.received.append(message)


def posted(actor: PostedTo) -> list[object]:
    """What the scan posted to the actor since the last look."""
    out, actor.received = actor.received, []
    return out


async def until_connected(nc: Client, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not nc.is_connected:
        assert time.monotonic() < deadline, "no reconnect"
        await asyncio.sleep(0.05)


async def watched_run(
    nc: Client, js: JetStreamContext, server: EmbeddedNats, steps: list[str]
) -> tuple[PostedTo, Liveness]:
    """A stored run of root steps, its actor (never started: it keeps what is posted to it)
    and the liveness of an orchestrator that holds it (silence limit 0.6 s)."""
    cmd = SubmitRun(
        run_id=RUN,
        submitted_at=from_epoch(T0),
        steps=[StepSpec(id=step, command="true") for step in steps],
    )
    # No tickets (as a run stored before them): the outcome below is its runner's own.
    state, effects = RunState.new(cmd, Policy(), T0, tickets=lambda: "")
    runner = EffectRunner(nc, js, await AckedPublisher(nc).start())
    await runner.apply(RUN, effects, create_run=True)
    actor = PostedTo(state, runner, on_done=lambda actor: None)
    settings = Settings(nats_url=server.url, heartbeat_interval=0.2, heartbeat_grace=3)
    heartbeats = await js.key_value(names.HEARTBEATS_BUCKET)
    res = Resources(js=js, kv={names.HEARTBEATS_BUCKET: heartbeats})
    return actor, Liveness(settings, res, {RUN: actor})


async def test_an_unreadable_outcome_postpones_the_verdict(
    own_nats_server: EmbeddedNats, heddle_nc: Client, caplog: pytest.LogCaptureFixture
) -> None:
    nc = heddle_nc
    js = nc.jetstream(timeout=0.5)
    actor, liveness = await watched_run(nc, js, own_nats_server, ["done", "dead"])
    state = actor.state
    # Both attempts were accepted by r1, whose last heartbeat is long past the silence limit.
    long_ago = time.monotonic() - 10
    liveness.view.grace_from = long_ago
    for step in ("done", "dead"):
        state.on_accepted(step, 1, "r1")
        beat = Heartbeat(runner="r1", run_id=RUN, step_id=step, attempt=1, seq=1)
        liveness.view.record(beat, T0, now=long_ago)
    # r1 reported "done" before it went quiet; "dead" it never reported.
    outcome = StepFinished(
        run_id=RUN,
        step_id="done",
        attempt=1,
        runner="r1",
        outcome="succeeded",
        finished_at=from_epoch(T0 + 1),
        exit_code=0,
    )
    await js.publish(names.evt(RUN, "done", "finished", "r1"), encode(outcome))

    own_nats_server.kill()
    with pytest.raises(OutcomeUnknown):
        await last_outcome(js, RUN, "done")
    caplog.set_level(logging.INFO, logger="heddle.orchestrator")
    await liveness.scan()
    assert posted(actor) == []  # neither failed while nothing could be read
    postponed = [r for r in caplog.records if r.getMessage() == "watchdog verdict postponed"]
    assert sorted(r.fields["step"] for r in postponed) == ["dead", "done"]

    own_nats_server.start()
    await until_connected(nc)
    await liveness.scan()
    got = {m.step_id: m for m in posted(actor)}  # type: ignore[attr-defined]
    assert got["done"] == outcome  # judged again: its stored outcome, not a verdict
    assert isinstance(got["dead"], Silent) and got["dead"].reason.startswith("runner r1 silent")
    await liveness.scan()
    assert posted(actor) == []  # each given once


async def test_an_unreadable_outcome_postpones_a_lost_attempts_requeue(
    nats_server: EmbeddedNats, heddle_nc: Client, caplog: pytest.LogCaptureFixture
) -> None:
    nc = heddle_nc
    js = nc.jetstream(timeout=2.0)
    actor, liveness = await watched_run(nc, js, nats_server, ["lost"])
    # Its ready message is gone (as with a broker killed at the wrong moment), and no runner
    # ever heartbeat it.
    await js.purge_stream(names.STEPS_STREAM, subject=names.step_ready(RUN, "lost", opens=True))
    period = liveness.backstop.tracker.period
    # The ready listing works; the outcome read gets no answer in time.
    liveness.backstop = Backstop(period, lambda run_id: ready_steps(js, run_id))
    liveness.js = nc.jetstream(timeout=1e-6)
    caplog.set_level(logging.INFO, logger="heddle.orchestrator")
    await liveness.look()  # first seen queued, nobody holding it
    await asyncio.sleep(period + 0.05)
    await liveness.look()  # its ready message missing once
    await liveness.look()  # missing twice: lost, but is its outcome stored?
    assert posted(actor) == []  # not queued again on a read that failed
    assert [r.fields["step"] for r in caplog.records if "postponed" in r.getMessage()] == ["lost"]
    liveness.js = js
    await liveness.look()  # found again, and now known to have no outcome
    [requeue] = posted(actor)
    assert isinstance(requeue, Lost) and (requeue.step_id, requeue.attempt) == ("lost", 1)
