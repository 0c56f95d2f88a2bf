"""A dispatcher that stood still (SIGSTOP, as a paused pod) holding a ready step for longer
than its acknowledgement wait does not offer it once moving again: the server gave it to
another dispatcher meanwhile, which placed it (services/dispatcher/app.py, ``_held_past``).
Offered anyway, it could reach a runner other than the one running it. Real processes."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from heddle.shared.wire import names

from tests.conftest import StackFactory
from tests.stack import freeze, step_of

pytestmark = pytest.mark.fault


async def until(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


async def test_a_step_held_by_a_frozen_dispatcher_runs_once(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    marker = tmp_path / "ran"
    # Both runners busy first, long enough to outlast a loaded machine's set-up; then b,
    # which can only wait in the dispatcher's hand.
    run_id = await s.submit(
        {"steps": [{"id": "a1", "command": "sleep 5"}, {"id": "a2", "command": "sleep 7"}]}
    )

    async def both_busy() -> bool:
        run = await s.run(run_id)
        return all(step_of(run, i)["status"] == "running" for i in ("a1", "a2"))

    await until(both_busy, 20, "a1 and a2 not running")
    b_run = await s.submit({"steps": [{"id": "b", "command": f"echo b >> {marker}; sleep 3"}]})
    async with await s.connect() as nc:

        async def in_hand() -> bool:
            info = await nc.jetstream().consumer_info(
                names.STEPS_STREAM, names.DISPATCHER_OPENING_DURABLE
            )
            return info.num_ack_pending == 1

        await until(in_hand, 20, "b not taken by the dispatcher")
    held = s.procs["dispatcher"]
    freeze(held.pid)
    try:
        s.start("dispatcher-1")  # given b once the frozen one's ack wait runs out
        await until(lambda: asyncio.sleep(0, marker.exists()), 20, "b did not start elsewhere")

        async def a2_done() -> bool:
            return step_of(await s.run(run_id), "a2")["status"] == "succeeded"

        await until(a2_done, 20, "a2 did not end")  # a runner is free for the frozen one
    finally:
        os.kill(held.pid, signal.SIGCONT)
    assert (await s.wait_run(b_run, timeout=30))["status"] == "succeeded"
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "succeeded"
    await asyncio.sleep(1.5)  # time enough for a second start of b
    assert marker.read_text() == "b\n", "b ran twice"
    said = [line for line in s.logs("dispatcher").splitlines() if '"step":"b"' in line]
    assert any('"msg":"left: ' in line for line in said), said
    assert not any('"msg":"assigned"' in line for line in said), said
