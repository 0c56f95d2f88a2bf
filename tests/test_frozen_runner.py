"""A runner that stood still (SIGSTOP, as a frozen pod or a paused machine would) refuses the
assignments that waited for it through the stall (shared/runtime/stalls.py): their
offers were given up, and the step went to another runner meanwhile. Real processes."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import msgspec
import nats.errors
import pytest
from heddle.shared.wire import names
from heddle.shared.wire.contracts import AssignReply, encode

from tests.conftest import StackFactory
from tests.stack import freeze, step_of
from tests.test_lost_assignments import ready_once

pytestmark = pytest.mark.fault


async def test_an_assignment_that_waited_through_a_stall_is_refused(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1, services=("orchestrator", "gateway"))
    runner = s.procs["runner-0"]
    ran = tmp_path / "ran"
    nc = await s.connect()
    try:
        freeze(runner.pid)
        with pytest.raises(nats.errors.TimeoutError):  # an offer given up, as a dispatcher's
            await nc.request(
                names.runner_assign("runner-0"), encode(ready_once("r-stale", ran)), timeout=1
            )
        await asyncio.sleep(0.5)  # frozen 1.5 s, the limit (HEDDLE_ASSIGN_TIMEOUT / 2) 0.5 s
        os.kill(runner.pid, signal.SIGCONT)
        await asyncio.sleep(1.0)
        assert not ran.exists(), "the runner ran an assignment whose offer was given up"
        assert "stale: this runner stood still for" in s.logs("runner-0")
        # Awake again, it takes what is offered now.
        reply = await nc.request(
            names.runner_assign("runner-0"), encode(ready_once("r-fresh", ran)), timeout=5
        )
        assert msgspec.json.decode(reply.data, type=AssignReply).accepted
        for _ in range(100):
            if ran.exists():
                break
            await asyncio.sleep(0.05)
        assert ran.read_text() == "once\n"
    finally:
        await nc.close()


async def test_a_step_offered_to_a_frozen_runner_runs_once_elsewhere(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    ran = tmp_path / "ran"
    frozen = s.procs["runner-0"]
    freeze(frozen.pid)
    try:
        # Two ready steps for two free runners: one of them is offered to the frozen one.
        run_id = await s.submit(
            {"steps": [{"id": i, "command": f"echo {i} >> {ran}"} for i in ("a", "b")]}
        )
        run = await s.wait_run(run_id, timeout=20)
        assert run["status"] == "succeeded"
        assert [step_of(run, i)["attempt"] for i in ("a", "b")] == [1, 1]
        assert "runner did not answer" in s.logs("dispatcher")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    await asyncio.sleep(1.5)
    assert sorted(ran.read_text().split()) == ["a", "b"], "a step ran twice"
    assert "stale: this runner stood still for" in s.logs("runner-0")
