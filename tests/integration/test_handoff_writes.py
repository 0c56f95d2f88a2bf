"""How a handoff's writes and its offer go out (services/orchestrator/effects.py), against a
real nats-server: the handed-off step's queued record first, the offer right after it without
waiting for the acknowledgements, and the offer once however often the writes are tried."""

from __future__ import annotations

import asyncio

import msgspec
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.effects import EffectRunner
from heddle.services.orchestrator.handoff import Handoffs
from heddle.services.orchestrator.messages import HandedOff, Message
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.offers import OfferDesk
from heddle.shared.broker.resources import stream_configs
from heddle.shared.broker.streams import ensure_stream
from heddle.shared.runtime.settings import Settings
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, StepFinished, StepSpec, SubmitRun, encode
from heddle.shared.wire.timefmt import from_epoch
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.support.run_records import finished

T0 = 1_800_000_000.0


class Runner:
    """A runner's assignment subject that accepts every offer and notes when it came."""

    def __init__(self) -> None:
        self.offers: list[str] = []
        self.while_writing: list[bool] = []
        self.applying: asyncio.Task | None = None

    async def on_offer(self, msg: Msg) -> None:
        self.offers.append(msg.data.decode())
        self.while_writing.append(self.applying is not None and not self.applying.done())
        await msg.respond(encode(AssignReply(accepted=True, runner="r1", jobs=1)))


class Answers:
    """The live runs' mailboxes, as the handoffs post to them: what each run is told."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, Message]] = []

    def post(self, run_id: str, message: Message, msg: Msg | None = None) -> bool:
        self.posted.append((run_id, message))
        return True

    def post_at(self, run_id: str, message: Message, at: float) -> None:
        self.post(run_id, message)


async def handing_off(nc: Client, runner: Runner) -> tuple[RunActor, list[tuple[str, Message]]]:
    """A run a -> (b, c) whose a is running on r1, its actor storing through a handoff."""
    answers = Answers()
    desk = OfferDesk(nc)
    await desk.start()
    handoffs = Handoffs(nc, desk, 2.0, answers)
    effects = EffectRunner(nc, nc.jetstream(), await AckedPublisher(nc).start(), handoffs=handoffs)
    cmd = SubmitRun(
        run_id="ho",
        submitted_at=from_epoch(T0),
        steps=[
            StepSpec(id="a", command="true"),
            StepSpec(id="b", command="true", depends_on=["a"]),
            StepSpec(id="c", command="true", depends_on=["a"]),
        ],
    )
    state, created = RunState.new(cmd, Policy(handoff=True), T0, tickets=lambda: "")
    await effects.apply("ho", created, create_run=True)
    await nc.subscribe(names.runner_assign("r1"), cb=runner.on_offer)
    return RunActor(state, effects, on_done=lambda actor: None), answers.posted


def a_succeeded() -> StepFinished:
    return msgspec.structs.replace(finished("a"), run_id="ho")


async def sequence(nc: Client, step: str) -> int:
    msg = await nc.jetstream().get_last_msg(
        f"KV_{names.RUNS_BUCKET}", names.kv_subject(names.RUNS_BUCKET, names.step_key("ho", step))
    )
    return msg.seq


async def test_the_handed_off_record_is_written_before_its_predecessor_s(
    heddle_nc: Client,
) -> None:
    runner = Runner()
    actor, answers = await handing_off(heddle_nc, runner)
    actor.post(a_succeeded())
    actor.start()
    await asyncio.wait_for(actor.drain(), 10)
    for _ in range(100):
        if answers:
            break
        await asyncio.sleep(0.02)
    assert len(runner.offers) == 1 and '"stepId":"b"' in runner.offers[0]
    # A server that loses the end of the pipeline loses a's success with b's record.
    assert await sequence(heddle_nc, "b") < await sequence(heddle_nc, "a")
    assert answers == [("ho", HandedOff("b", 1, 0, "r1", "accepted"))]
    await actor.stop()


async def test_the_offer_leaves_before_the_writes_are_stored_and_only_once(
    heddle_nc: Client,
) -> None:
    js = heddle_nc.jetstream()
    runner = Runner()
    actor, answers = await handing_off(heddle_nc, runner)
    # c's ready message has nowhere to go: the batch's writes fail and are tried again.
    await js.delete_stream(names.STEPS_STREAM)
    try:
        actor.post(a_succeeded())
        actor.start()
        runner.applying = asyncio.create_task(actor.drain())
        await asyncio.sleep(1.0)  # several tries
        assert not runner.applying.done()
    finally:
        await ensure_stream(js, stream_configs(Settings())[names.STEPS_STREAM])
    await asyncio.wait_for(runner.applying, 10)
    assert runner.while_writing == [True], runner.while_writing
    assert [a.step_id for _, a in answers if isinstance(a, HandedOff)] == ["b"]
    await actor.stop()
