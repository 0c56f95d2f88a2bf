"""A run actor's writes wait while its orchestrator's lease is stale
(services/orchestrator/effects.py, ``EffectRunner.lease``), against a real nats-server: a
holder that stood still past its lease writes nothing it decided until it is renewed."""

from __future__ import annotations

import asyncio

import pytest
from heddle.services.orchestrator.actor import RunActor
from heddle.services.orchestrator.effects import EffectRunner
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepSpec, SubmitRun
from heddle.shared.wire.timefmt import from_epoch
from nats.aio.client import Client

from tests.test_group_commit import T0, finished, record, writes


class Lease:
    """A lease that is stale until renewed."""

    def __init__(self) -> None:
        self.ok = True
        self._renewal = asyncio.Event()

    def fresh(self) -> bool:
        return self.ok

    async def until_fresh(self) -> None:
        while not self.ok:
            await self._renewal.wait()

    def renew(self) -> None:
        self.ok = True
        self._renewal.set()


@pytest.fixture
def nc(heddle_nc: Client) -> Client:
    return heddle_nc


async def test_writes_wait_for_a_stale_lease_to_be_renewed(nc: Client) -> None:
    lease = Lease()
    effects = EffectRunner(nc, nc.jetstream(), await AckedPublisher(nc).start(), lease=lease)
    cmd = SubmitRun(
        run_id="gc", submitted_at=from_epoch(T0), steps=[StepSpec(id="a", command="true")]
    )
    state, created = RunState.new(cmd, Policy(), T0, tickets=lambda: "")
    await effects.apply("gc", created, create_run=True)
    actor = RunActor(state, effects, on_done=lambda actor: None)
    actor.start()
    lease.ok = False  # as in a process that stood still past its lease
    before = await writes(nc)
    actor.post(finished("a"))
    draining = asyncio.create_task(actor.drain())
    await asyncio.sleep(0.5)
    assert not draining.done()
    assert await writes(nc) == before  # nothing decided meanwhile is written
    lease.renew()
    await asyncio.wait_for(draining, 5)
    assert (await record(nc, names.step_key("gc", "a")))["status"] == "succeeded"
    assert (await record(nc, names.run_key("gc")))["status"] == "succeeded"
    await actor.stop()
