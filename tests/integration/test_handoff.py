"""Handing a readied step to the runner that just succeeded, on a real stack: a chain stays on
one runner with no dispatcher between its steps, and a runner that cannot take its handoff
(gone, or frozen and silent) has the step placed by the dispatcher instead, run once."""

from __future__ import annotations

import pytest

from tests.support.metrics import scrape, value
from tests.support.stack import StackFactory, step_of, until


def chain(n: int) -> dict:
    steps = [{"id": "s0", "command": "true"}]
    steps += [{"id": f"s{i}", "command": "true", "dependsOn": [f"s{i - 1}"]} for i in range(1, n)]
    return {"steps": steps}


async def test_a_chain_stays_on_the_runner_that_frees_up(stack: StackFactory) -> None:
    s = await stack(runners=3, metrics=True)
    run = await s.wait_run(await s.submit(chain(8)), timeout=20)
    assert run["status"] == "succeeded"
    assert len({st["runner"] for st in run["steps"]}) == 1
    assert all(len(st["attempts"]) == 1 for st in run["steps"])
    # All but the root: handed off, or started by the runner as a continuation.
    handed = s.logs("orchestrator").count('"handed off"')
    continued = sum(s.logs(f"runner-{i}").count('"msg":"continued"') for i in range(3))
    assert handed + continued == 7 and continued > 0
    # The continuations the runners started, counted as the orchestrator took them.
    counted = await scrape(s, "orchestrator")
    assert value(counted, "heddle_continuations_total", fate="started") == continued
    assert value(counted, "heddle_continuations_total", fate="sent") >= continued
    assert s.logs("dispatcher").count('"assigned"') == 1


async def test_with_handoff_off_the_dispatcher_places_every_step(stack: StackFactory) -> None:
    s = await stack(runners=3, HEDDLE_HANDOFF="off")
    # The dispatcher's own view: the gateway may list a runner a moment before it has it.
    await until(lambda: s.logs("dispatcher").count('"runner joined"') == 3, 10, "3 runners")
    run = await s.wait_run(await s.submit(chain(6)), timeout=20)
    assert run["status"] == "succeeded"
    # Which runner takes each is the pool's round robin (tests/unit/dispatcher/test_pool.py): a
    # runner may refuse an offer, and the next go to another, so no spread is certain here.
    assert all(len(st["attempts"]) == 1 for st in run["steps"])
    assert '"handed off"' not in s.logs("orchestrator")
    assert s.logs("dispatcher").count('"assigned"') == 6


@pytest.mark.parametrize(
    ("action", "answers"), [("exit", {"refused", "unanswered"}), ("stop", {"unanswered"})]
)
async def test_a_handoff_its_runner_cannot_take_goes_through_the_dispatcher(
    stack: StackFactory, action: str, answers: set[str]
) -> None:
    """The runner that ran ``a`` exits (nobody answers on its subject) or freezes right after
    its outcome is stored (the offer arrives and is never answered): ``b`` is placed by the
    dispatcher on the other runner, its first attempt, not a retry. (``a`` has an output, so
    its runner does not go on to ``b`` as its continuation.)"""
    s = await stack(runners=0, HEDDLE_REGISTRY_TTL="30")
    s.start("runner-x", HEDDLE_FAILPOINTS=f"runner.after_report={action}")
    await s.wait_ready(1)
    s.start("runner-y")  # after x: the dispatcher offers a to x, the least recently used
    await s.wait_ready(2)
    try:
        a_then_b = [
            {"id": "a", "command": 'echo out=1 >> "$HEDDLE_OUTPUTS"'},
            {"id": "b", "command": "true", "dependsOn": ["a"]},
        ]
        run = await s.wait_run(await s.submit({"steps": a_then_b}), timeout=30)
    finally:
        s.kill("runner-x")  # a frozen one never wakes to run what it was offered
    assert run["status"] == "succeeded", run
    a, b = step_of(run, "a"), step_of(run, "b")
    assert a["runner"] == "runner-x" and b["runner"] == "runner-y"
    assert [len(a["attempts"]), len(b["attempts"]), b["attempt"]] == [1, 1, 1]
    said = {answer for answer in answers if f'"handoff {answer}"' in s.logs("orchestrator")}
    assert said and '"handed off"' not in s.logs("orchestrator")
