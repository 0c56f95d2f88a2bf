"""Namespaces' quotas against a real stack (docs/namespaces.md, "Quotas"): the records made
and shown by the API, a running-steps quota held over a fan-out across two orchestrators
while another namespace goes on at full speed, a runs-under-way quota holding a namespace's
further runs in the order they came, and the waits they cause said."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from heddle.shared.core.namespaces import qualified

from tests.support.namespaces import (
    intervals,
    most_at_once,
    records,
    set_quotas,
    submit_in,
    wait_ended,
)
from tests.support.stack import StackFactory


def fan_out(seconds: float, n: int = 4) -> dict[str, Any]:
    return {"steps": [{"id": f"s{k}", "command": f"sleep {seconds}"} for k in range(n)]}


async def test_namespaces_are_made_by_the_system_admin_and_seen_by_their_grants(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    status, body = await s.request("GET", "/api/namespaces")
    assert status == 200
    assert [d["name"] for d in body["namespaces"]] == ["default"]
    made = await set_quotas(s, "team-a", maxRunningSteps=2)
    assert (made["maxRunningSteps"], made["maxRunsUnderWay"]) == (2, None)
    assert (made["runningSteps"], made["runsUnderWay"]) == (0, 0)
    again = await set_quotas(s, "team-a", maxRunsUnderWay=3)
    assert (again["maxRunningSteps"], again["maxRunsUnderWay"]) == (None, 3)
    assert again["createdAt"] == made["createdAt"]

    status, body = await s.request(
        "PUT", "/api/namespaces/bad.name", json={"maxRunsUnderWay": 0, "color": 1}
    )
    assert status == 400
    assert sorted(p["path"] for p in body["problems"]) == ["color", "maxRunsUnderWay", "ns"]

    status, token = await s.request("POST", "/api/tokens", json={"name": "v", "role": "viewer"})
    assert status == 201
    viewer = {"Authorization": f"Bearer {token['token']}"}  # default's viewer alone
    status, body = await s.request("GET", "/api/namespaces", headers=viewer)
    assert [d["name"] for d in body["namespaces"]] == ["default"]
    missing = await s.request("GET", "/api/namespaces/nowhere", headers=viewer)
    hidden = await s.request("GET", "/api/namespaces/team-a", headers=viewer)
    assert hidden[0] == missing[0] == 404
    assert hidden[1]["error"].replace("team-a", "X") == missing[1]["error"].replace("nowhere", "X")
    status, _ = await s.request("PUT", "/api/namespaces/x", json={}, headers=viewer)
    assert status == 403
    status, body = await s.request("GET", "/api/namespaces")
    assert [d["name"] for d in body["namespaces"]] == ["default", "team-a"]


async def test_a_running_steps_quota_holds_for_its_namespace_alone(stack: StackFactory) -> None:
    s = await stack(runners=5, orchestrators=2)
    await set_quotas(s, "team-a", maxRunningSteps=1)
    quota_run = await submit_in(s, "team-a", "fan", fan_out(0.5))
    free_run = await submit_in(s, "default", "fan", fan_out(2))

    # While team-a's steps run one at a time, the others wait, naming the quota.
    deadline = time.monotonic() + 30
    while True:
        _, steps = await records(s, quota_run)
        waits = {st.semaphore_wait for st in steps if st.status == "pending"}
        if len(steps) == 4 and waits == {"team-a==running-steps"}:
            break
        assert time.monotonic() < deadline, steps
        await asyncio.sleep(0.05)
    status, ns = await s.request("GET", "/api/namespaces/team-a")
    assert status == 200 and ns["runningSteps"] in (0, 1)

    free = await s.wait_run(free_run, timeout=60)
    assert free["status"] == "succeeded"
    assert most_at_once(intervals(free["steps"])) == 4  # no quota: its fan-out at full speed
    quota_steps = await wait_ended(s, quota_run)
    assert most_at_once([(st.started_at, st.finished_at) for st in quota_steps]) == 1
    status, ns = await s.request("GET", "/api/namespaces/team-a")
    assert (ns["runningSteps"], ns["maxRunningSteps"]) == (0, 1)


async def test_a_step_waiting_for_its_quota_says_so(stack: StackFactory) -> None:
    s = await stack(runners=2)
    await set_quotas(s, "default", maxRunningSteps=1)
    run_id = await submit_in(s, "default", "pair", fan_out(30, n=2))
    deadline = time.monotonic() + 30
    while True:
        run = await s.run(run_id)
        waiting = [st for st in run["steps"] if st["status"] == "pending"]
        if any(st["status"] == "running" for st in run["steps"]) and waiting:
            break
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)
    [step] = waiting
    assert step["waitingFor"]["reason"] == "quota"
    assert (step["waitingFor"]["namespace"], step["waitingFor"]["quota"]) == ("default", 1)
    status, ns = await s.request("GET", "/api/namespaces/default")
    assert (ns["runningSteps"], ns["runsUnderWay"]) == (1, 1)
    _, listed = await s.request("GET", "/api/semaphores")
    assert listed["semaphores"] == []  # the quota's count is the namespace's, not a semaphore

    # Raised: the waiting step goes at once.
    await set_quotas(s, "default", maxRunningSteps=2)
    await s.wait_step(run_id, step["id"], {"running"}, timeout=30)
    status, _ = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status in (200, 202)


def gated(gate: Any) -> dict[str, Any]:
    return {"steps": [{"id": "hold", "command": f"while [ ! -e {gate} ]; do sleep 0.05; done"}]}


async def test_a_runs_under_way_quota_holds_its_namespaces_further_runs(
    stack: StackFactory,
) -> None:
    s = await stack(runners=3, orchestrators=2)
    await set_quotas(s, "team-a", maxRunsUnderWay=1)
    gate = s.tmp / "gate"
    await submit_in(s, "team-a", "first", gated(gate))
    await s.wait_step("first?namespace=team-a", "hold", {"running"})
    await submit_in(s, "team-a", "second", gated(gate))
    # The third has a concurrency key of its own: it holds that, and waits for the quota.
    solo = {"name": "solo", "namespace": "team-a", "concurrency": {"key": "'solo'"}}
    status, body = await s.request("POST", "/api/workflows", json={**solo, **gated(gate)})
    assert status == 201, body
    status, body = await s.request("POST", "/api/workflows/solo/runs?namespace=team-a", json={})
    assert status == 201, body
    third_id = body["runId"]

    # Another namespace goes on at once, while team-a's first run holds its quota.
    free = await submit_in(s, "default", "free", {"steps": [{"id": "a", "command": "true"}]})
    assert (await s.wait_run(free))["status"] == "succeeded"
    second = await s.run("second?namespace=team-a")
    assert second["status"] == "running" and second["counts"] == {"pending": 1}
    assert second["waitingFor"] == {
        "reason": "quota",
        "sentence": "Namespace team-a is at its quota of 1 run under way, held by run first.",
        "namespace": "team-a",
        "quota": 1,
        "holders": ["first"],
    }
    status, ns = await s.request("GET", "/api/namespaces/team-a")
    assert (status, ns["runsUnderWay"], ns["maxRunsUnderWay"]) == (200, 1, 1)

    # Raised, the run that came next goes at once; the third still waits its turn.
    await set_quotas(s, "team-a", maxRunsUnderWay=2)
    await s.wait_step("second?namespace=team-a", "hold", {"running"})
    third = await s.run(f"{third_id}?namespace=team-a")
    assert third["waitingFor"]["reason"] == "quota" and third["waitingFor"]["quota"] == 2
    assert third["counts"] == {"pending": 1}
    # Removed, nothing is held back.
    await set_quotas(s, "team-a", maxRunsUnderWay=None)
    await s.wait_step(f"{third_id}?namespace=team-a", "hold", {"running"})
    gate.touch()
    for run in ("first", "second", third_id):
        await wait_ended(s, qualified("team-a", run))
