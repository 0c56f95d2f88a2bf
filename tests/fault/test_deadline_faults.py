"""A run's deadline outlives its orchestrator (docs/workflows.md, "Run deadlines"): stored
in the run's record, it is neither reset nor lost when the orchestrator holding the run is
SIGKILLed mid-run, whether it comes back before the deadline (which it schedules again),
after it (which it acts on at once), or another orchestrator takes the run over. The
deadline against a stack left alone: tests/integration/test_deadline.py."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from heddle.shared.core.partitions import partition_of
from heddle.shared.wire.timefmt import parse

from tests.support.deadlines import outlived, outliving
from tests.support.partitions import PARTITIONS, balanced, held
from tests.support.stack import StackFactory

TIMEOUT = 4.0


@pytest.mark.parametrize("back", ["before", "after"])
async def test_a_deadline_holds_across_an_orchestrator_sigkilled_mid_run(
    stack: StackFactory, tmp_path: Path, back: str
) -> None:
    """Back ``before`` the deadline: the run's timer is set again from its record (a new
    one would be later). Back ``after``: the deadline passed while no orchestrator ran, and
    the run is stopped as soon as it is rebuilt."""
    s = await stack(runners=1)
    pid_file = tmp_path / "sleep.pid"
    run_id = await s.submit(outliving(TIMEOUT, pid_file))
    await s.wait_step(run_id, "slow", {"running"})
    deadline = parse((await s.run(run_id))["deadlineAt"]).timestamp()
    s.kill("orchestrator", signal.SIGKILL)
    if back == "after":
        await asyncio.sleep(max(deadline - time.time(), 0) + 1)
        assert (await s.run(run_id))["status"] == "running"  # no one stopped it meanwhile
    s.start("orchestrator")
    run = await s.wait_run(run_id, timeout=30)  # not the 30 s of the step
    await outlived(run, TIMEOUT, pid_file)
    assert parse(run["deadlineAt"]).timestamp() == deadline  # neither reset nor lost


async def test_a_deadline_holds_when_another_orchestrator_takes_the_run_over(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1, orchestrators=2)
    await balanced(s, ("orchestrator", "orchestrator-1"))
    victims = held(s, "orchestrator")
    run_id = next(
        r for r in (f"dl-{i}" for i in range(500)) if partition_of(r, PARTITIONS) in victims
    )
    pid_file = tmp_path / "sleep.pid"
    await s.submit(outliving(TIMEOUT, pid_file, runId=run_id))
    await s.wait_step(run_id, "slow", {"running"})
    s.kill("orchestrator", signal.SIGKILL)
    run = await s.wait_run(run_id, timeout=30)
    await outlived(run, TIMEOUT, pid_file)
    assert partition_of(run_id, PARTITIONS) in held(s, "orchestrator-1")  # the taker's doing
