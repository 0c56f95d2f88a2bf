"""A run document says why its steps and the run wait (docs/api.md, "Why a step waits"),
through the real services: a retry's backoff, a queued step while the pool's one runner is
busy, a full semaphore, the run's window, no runner with the labels, and runs waiting behind
the bound or a run of higher priority."""

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


async def test_every_other_reason_a_step_or_run_waits(stack: StackFactory) -> None:
    s = await stack(runners=1, HEDDLE_MAX_RUNS_UNDER_WAY="3", HEDDLE_RUN_WINDOW="2")
    gate = s.tmp / "gate"
    hold = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    first = await s.submit(
        {
            "steps": [
                {"id": "hold", "command": hold, "semaphores": ["db"]},
                {"id": "sem", "command": "true", "semaphores": ["db"]},
            ]
        }
    )
    await s.wait_step(first, "hold", {"running"})  # the one runner, and db's one slot
    # Two queued for the busy runner, the third held back by the run's window (2).
    windowed = await s.submit({"steps": [{"id": f"w{i}", "command": "true"} for i in range(3)]})
    second = await s.submit({"steps": [{"id": "tpu", "command": "true", "runsOn": ["tpu"]}]})
    low = await s.submit({"steps": [{"id": "x", "command": "true"}]})  # past the 3 under way
    high = await s.submit({"priority": 5, "steps": [{"id": "y", "command": "true"}]})

    async def reasons() -> dict[str, str | None]:
        one, w, two = await s.run(first), await s.run(windowed), await s.run(second)
        three, four = await s.run(low), await s.run(high)
        found: dict[str, str | None] = {
            sid: step_of(w, sid).get("waitingFor", {}).get("reason") for sid in ("w0", "w1", "w2")
        }
        found["sem"] = step_of(one, "sem").get("waitingFor", {}).get("reason")
        found["tpu"] = step_of(two, "tpu").get("waitingFor", {}).get("reason")
        found["low"] = three.get("waitingFor", {}).get("reason")
        found["high"] = four.get("waitingFor", {}).get("reason")
        return found

    expected = {
        "w0": "runners-busy",
        "w1": "runners-busy",
        "w2": "turn",
        "sem": "semaphore",
        "tpu": "no-runner",
        "low": "priority",  # behind the run of priority 5
        "high": "runs-at-limit",
    }
    for _ in range(200):
        found = await reasons()
        if found == expected:
            break
        await asyncio.sleep(0.05)
    assert found == expected
    sem = step_of(await s.run(first), "sem")["waitingFor"]
    assert sem["semaphore"] == "db" and sem["holders"] == [f"{first}/hold"], sem
    assert (await s.run(low))["waitingFor"]["ahead"] == 1
    gate.touch()
    for run_id in (second, low, high):
        await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert (await s.wait_run(first))["status"] == "succeeded"
    assert (await s.wait_run(windowed))["status"] == "succeeded"
