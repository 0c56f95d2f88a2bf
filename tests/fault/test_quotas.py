"""A namespace's quotas across an orchestrator's SIGKILL (docs/namespaces.md, "Quotas"): the
running steps' count it keeps in KV loses and doubles nothing, GET /api/namespaces shows it,
and the quota still holds for the steps begun after the restart; a run held back by the
runs-under-way quota still waits after it, and starts when the run under way ends."""

from __future__ import annotations

import signal

from heddle.shared.wire.timefmt import epoch_of

from tests.support.namespaces import (
    most_at_once,
    records,
    set_quotas,
    submit_in,
    wait_ended,
)
from tests.support.stack import StackFactory, eventually


async def test_the_count_survives_an_orchestrators_kill(stack: StackFactory) -> None:
    s = await stack(runners=4)
    await set_quotas(s, "team-a", maxRunningSteps=2)
    doc = {"steps": [{"id": f"s{k}", "command": "sleep 2"} for k in range(5)]}
    run_id = await submit_in(s, "team-a", "fan", doc)

    async def running() -> int:
        return sum(st.status == "running" for st in (await records(s, run_id))[1])

    async def both_held() -> bool:
        return await running() == 2

    async def counted() -> bool:
        status, ns = await s.request("GET", "/api/namespaces/team-a")
        return status == 200 and ns["runningSteps"] == await running() > 0

    await eventually(both_held, "both of the quota's slots held")
    s.kill("orchestrator", signal.SIGKILL)
    s.start("orchestrator")
    # Once it has taken the partitions again, the count is the steps running.
    await eventually(counted, "the count matching the running steps")
    steps = await wait_ended(s, run_id, timeout=90)
    assert most_at_once([(st.started_at, st.finished_at) for st in steps]) == 2
    status, ns = await s.request("GET", "/api/namespaces/team-a")
    assert (status, ns["runningSteps"], ns["maxRunningSteps"]) == (200, 0, 2)


async def test_a_run_held_by_the_runs_quota_still_waits_after_a_kill(stack: StackFactory) -> None:
    s = await stack(runners=2)
    await set_quotas(s, "team-a", maxRunsUnderWay=1)
    gate = s.tmp / "gate"
    hold = {"steps": [{"id": "hold", "command": f"while [ ! -e {gate} ]; do sleep 0.05; done"}]}
    first = await submit_in(s, "team-a", "first", hold)
    await s.wait_step("first?namespace=team-a", "hold", {"running"})
    second = await submit_in(s, "team-a", "second", {"steps": [{"id": "a", "command": "true"}]})

    async def held() -> bool:
        run, _ = await records(s, second)
        return run is not None and run.quota_wait

    await eventually(held, "the second run held by the quota")
    s.kill("orchestrator", signal.SIGKILL)
    s.start("orchestrator")
    # A run of another namespace ends: the orchestrator serves the partitions again.
    free = await submit_in(s, "default", "free", {"steps": [{"id": "a", "command": "true"}]})
    assert (await s.wait_run(free, timeout=60))["status"] == "succeeded"
    waiting = await s.run("second?namespace=team-a")
    assert waiting["counts"] == {"pending": 1} and waiting["waitingFor"]["reason"] == "quota"
    status, ns = await s.request("GET", "/api/namespaces/team-a")
    assert (status, ns["runsUnderWay"]) == (200, 1)

    gate.touch()
    [held_step] = await wait_ended(s, first)
    [then] = await wait_ended(s, second)
    assert held_step.finished_at is not None and then.started_at is not None
    assert epoch_of(held_step.finished_at, 0) <= epoch_of(then.started_at, 0)  # never two
    status, ns = await s.request("GET", "/api/namespaces/team-a")
    assert (ns["runsUnderWay"], ns["maxRunsUnderWay"]) == (0, 1)
