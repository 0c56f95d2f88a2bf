"""A new run's step records stored in bulk (services/orchestrator/bulk_writes.py), against a
real nats-server: every record lands, and a small run is left to the ordinary path."""

from __future__ import annotations

import pytest
from heddle.services.orchestrator.bulk_writes import CHECKPOINT, write_new_steps
from heddle.services.orchestrator.decisions import PersistStep
from heddle.services.orchestrator.state import Policy, RunState
from heddle.shared.broker.acked import AckedPublisher
from heddle.shared.broker.kv_reads import count_keys
from heddle.shared.wire import names
from heddle.shared.wire.contracts import StepSpec, SubmitRun, step_record_decoder
from heddle.shared.wire.timefmt import from_epoch
from nats.aio.client import Client

from tests.test_group_commit import T0


@pytest.fixture
def nc(heddle_nc: Client) -> Client:
    return heddle_nc


def _new_run(run_id: str, steps: int) -> list:
    cmd = SubmitRun(
        run_id=run_id,
        submitted_at=from_epoch(T0),
        steps=[
            StepSpec(id=f"s{i}", command="true", depends_on=["s0"] if i else [])
            for i in range(steps)
        ],
    )
    _, effects = RunState.new(cmd, Policy(), T0, tickets=lambda: "")
    return effects


async def test_a_big_new_run_is_written_in_bulk_and_every_record_lands(nc: Client) -> None:
    js = nc.jetstream()
    effects = _new_run("bulk", 2 * CHECKPOINT + 7)
    pending = [
        i
        for i, e in enumerate(effects)
        if isinstance(e, PersistStep) and e.step.status == "pending"
    ]
    assert len(pending) == 2 * CHECKPOINT + 6  # s0 is queued, not pending
    written = await write_new_steps(nc, js, await AckedPublisher(nc).start(), "bulk", effects)
    assert written == pending
    assert await count_keys(js, names.RUNS_BUCKET, names.steps_of_run("bulk")) == len(pending)
    last = effects[pending[-1]].step
    entry = await (await js.key_value(names.RUNS_BUCKET)).get(names.step_key("bulk", last.id))
    assert step_record_decoder.decode(entry.value) == last


async def test_a_small_new_run_is_left_to_the_pipelined_writes(nc: Client) -> None:
    js = nc.jetstream()
    effects = _new_run("small", CHECKPOINT - 1)
    assert await write_new_steps(nc, js, await AckedPublisher(nc).start(), "small", effects) == []
    assert await count_keys(js, names.RUNS_BUCKET, names.steps_of_run("small")) == 0
