"""Run priorities through the real services: a run of higher priority submitted behind a
backlog of waiting runs starts first, a trigger's priority wins over its workflow's, and an
orchestrator killed and restarted keeps its waiting runs in that order; a cron slot's run
takes its workflow's priority."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from heddle.shared.wire.timefmt import parse

from tests.support.scheduling import MIN, Env
from tests.support.scheduling import env as env  # the fixture
from tests.support.stack import StackFactory, step_of

WORKFLOW = {"name": "ranked", "priority": 5, "steps": [{"id": "a", "command": "true"}]}


def one_step(command: str, **top: Any) -> dict[str, Any]:
    return {"steps": [{"id": "a", "command": command}], **top}


async def test_a_high_priority_run_submitted_behind_a_backlog_starts_first(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_MAX_RUNS_UNDER_WAY="1")
    assert (await s.request("POST", "/api/workflows", json=WORKFLOW))[0] == 201
    status, body = await s.request("POST", "/api/workflows/ranked/runs", json={"priority": 1001})
    assert status == 400 and [p["path"] for p in body["problems"]] == ["priority"], body
    status, body = await s.request("POST", "/api/runs", json=one_step("", priority="high"))
    assert status == 400, body
    assert {p["path"] for p in body["problems"]} == {"priority", "steps[0].command"}, body

    blocker = await s.submit(one_step("sleep 1"))  # under way: every later run waits
    backlog = [await s.submit(one_step("true")) for _ in range(2)]
    status, lowered = await s.request("POST", "/api/workflows/ranked/runs", json={"priority": -2})
    assert status == 201, lowered
    status, as_defined = await s.request("POST", "/api/workflows/ranked/runs")
    assert status == 201, as_defined
    urgent = await s.submit(one_step("true", priority=10))

    waiting = await s.run(urgent)
    assert waiting["waiting"] is True and waiting["priority"] == 10, waiting
    status, listed = await s.request("GET", "/api/runs")
    priorities = {r["runId"]: r["priority"] for r in listed["runs"]}
    assert priorities[lowered["runId"]] == -2 and priorities[as_defined["runId"]] == 5
    assert priorities[backlog[0]] == 0 and priorities[urgent] == 10
    status, definition = await s.request("GET", "/api/workflows/ranked")
    assert definition["priority"] == 5

    order = [urgent, as_defined["runId"], *backlog, lowered["runId"]]
    runs = [await s.wait_run(r) for r in [blocker, *order]]
    assert [r["status"] for r in runs] == ["succeeded"] * 6, runs
    started = [parse(step_of(r, "a")["queuedAt"]) for r in runs[1:]]
    # One run under way at a time: each was admitted as the one before it ended.
    assert started == sorted(started), list(zip(order, started, strict=True))
    assert parse(runs[0]["finishedAt"]) <= started[0]


@pytest.mark.fault
async def test_an_orchestrator_restarted_admits_its_waiting_runs_by_priority_still(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_MAX_RUNS_UNDER_WAY="1")
    blocker = await s.submit(one_step("sleep 1"))
    backlog = [await s.submit(one_step("true")) for _ in range(2)]
    urgent = await s.submit(one_step("true", priority=10))
    s.kill("orchestrator", signal.SIGKILL)
    s.start("orchestrator")  # rebuilds the runs, oldest first, into its line
    order = [urgent, *backlog]
    runs = [await s.wait_run(r, timeout=40.0) for r in [blocker, *order]]
    assert [r["status"] for r in runs] == ["succeeded"] * 4, runs
    started = [parse(step_of(r, "a")["queuedAt"]) for r in runs[1:]]
    assert started == sorted(started), list(zip(order, started, strict=True))


async def test_a_scheduled_run_takes_its_workflows_priority(env: Env) -> None:
    await env.register(priority=-7)
    sched = env.scheduler()
    env.clock.advance(2 * MIN)
    assert await sched.tick() == 2
    assert [run.priority for run in await env.submitted()] == [-7, -7]
