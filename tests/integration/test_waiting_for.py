"""A run document says why its steps and the run wait (docs/api.md, "Why a step waits"),
through the real services: a retry's backoff, and a queued step while the pool's one runner
is busy."""

from __future__ import annotations

import asyncio

from tests.support.stack import StackFactory, step_of


async def test_a_run_document_says_why_its_steps_wait(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_RETRY_BASE="60", HEDDLE_RETRY_CAP="60")
    flaky = await s.submit({"steps": [{"id": "flaky", "command": "exit 3", "retries": 1}]})
    retrying = await s.wait_step(flaky, "flaky", {"retrying"})
    why = retrying["waitingFor"]
    assert why["reason"] == "backoff" and why["until"] == retrying["retryAt"], why
    run = await s.run(flaky)
    assert run["waitingFor"]["reason"] == "backoff"
    assert run["waitingFor"]["sentence"].startswith("Step flaky: ")

    both = await s.submit(
        {"steps": [{"id": "a", "command": "sleep 30"}, {"id": "b", "command": "sleep 30"}]}
    )
    await s.wait_run(both, statuses={"running"})
    for _ in range(400):  # one of the two runs on the only runner, the other waits for it
        run = await s.run(both)
        states = {st["id"]: st["status"] for st in run["steps"]}
        if sorted(states.values()) == ["queued", "running"]:
            break
        await asyncio.sleep(0.05)
    assert sorted(states.values()) == ["queued", "running"], run
    waiting = step_of(run, next(i for i, st in states.items() if st == "queued"))
    assert waiting["waitingFor"] == {
        "reason": "runners-busy",
        "sentence": "Every runner of pool default is busy (1 of 1).",
        "pool": "default",
        "busy": 1,
        "total": 1,
    }
    running = step_of(run, next(i for i, st in states.items() if st == "running"))
    assert "waitingFor" not in running
    assert "waitingFor" not in run  # a step of it runs
