"""A runner kills an attempt only on a cancel that carries the attempt's ticket, as it speaks
for the attempt only with it (docs/security.md, "Tickets"): a cancel published to its
subject by anyone else, with no ticket or another one, leaves the step running to its
success, while the orchestrator's cancel (the API's) still kills it. Real services."""

from __future__ import annotations

import json

import pytest
from heddle.shared.wire import names

from tests.support.stack import StackFactory, step_of

# What a client that can reach a runner's cancel subject sends: the attempt's names, with no
# ticket (all a cancel had before tickets) or a made-up one.
FORGED = [{}, {"ticket": ""}, {"ticket": "0123456789abcdef"}]


async def test_a_cancel_without_the_attempts_ticket_leaves_the_step_running(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    run_id = await s.submit({"steps": [{"id": "a", "command": "sleep 3; echo done"}]})
    running = await s.wait_step(run_id, "a", {"running"})
    nc = await s.connect()  # the tests' superuser: it may publish anywhere
    try:
        for forged in FORGED:
            cancel = {"runId": run_id, "stepId": "a", "attempt": running["attempt"], **forged}
            cancel["reason"] = "forged"
            await nc.publish(names.runner_cancel(running["runner"]), json.dumps(cancel).encode())
        await nc.flush()
    finally:
        await nc.close()
    run = await s.wait_run(run_id, timeout=20)
    a = step_of(run, "a")
    assert (run["status"], a["exitCode"], a["stdoutTail"].strip()) == ("succeeded", 0, "done")
    assert len(a["attempts"]) == 1


@pytest.mark.parametrize("chain", [False, True], ids=["step", "step-after-another"])
async def test_the_apis_cancel_carries_the_ticket_and_kills_the_step(
    stack: StackFactory, chain: bool
) -> None:
    """The second step of a chain runs on the runner that ran the first (a continuation,
    with a ticket of its own): its cancel carries that one."""
    s = await stack(runners=1)
    steps = [{"id": "b", "command": "sleep 30"}]
    if chain:
        steps = [{"id": "a", "command": "true"}, {**steps[0], "dependsOn": ["a"]}]
    run_id = await s.submit({"steps": steps})
    await s.wait_step(run_id, "b", {"running"})
    status, body = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert (status, body["status"]) == (202, "cancelling")
    run = await s.wait_run(run_id, timeout=15)  # not the 30 s of the step
    assert run["status"] == "cancelled"
    assert (step_of(run, "b")["status"], step_of(run, "b")["reason"]) == ("cancelled", "cancelled")
