"""A namespace's running-steps quota across an orchestrator's SIGKILL (docs/namespaces.md,
"Quotas"): the count it keeps in KV loses and doubles nothing, GET /api/namespaces shows it,
and the quota still holds for the steps begun after the restart."""

from __future__ import annotations

import signal

from tests.support.namespaces import (
    eventually,
    most_at_once,
    records,
    set_quotas,
    submit_in,
    wait_ended,
)
from tests.support.stack import StackFactory


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
