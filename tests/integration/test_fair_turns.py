"""Fair turns through the real services (docs/pools.md, "Fair turns"): a small run submitted
behind a big fan-out gets runners in turn and ends while the fan-out has most of its steps
left; a run of higher priority goes before runs waiting in the dispatcher's hand."""

from __future__ import annotations

from heddle.shared.wire.timefmt import parse

from tests.support.stack import StackFactory, step_of

FANOUT = 800


def diamond() -> dict:
    return {
        "steps": [
            {"id": "a", "command": "true"},
            {"id": "b", "command": "true", "dependsOn": ["a"]},
            {"id": "c", "command": "true", "dependsOn": ["a"]},
            {"id": "d", "command": "true", "dependsOn": ["b", "c"]},
        ]
    }


async def test_a_diamond_behind_a_big_fan_out_ends_long_before_it(stack: StackFactory) -> None:
    s = await stack(runners=4)
    children = [{"id": f"b{i}", "command": "sleep 0.05", "dependsOn": ["a"]} for i in range(FANOUT)]
    big = await s.submit({"steps": [{"id": "a", "command": "true"}, *children]})
    await s.wait_step(big, "b0", {"running", "succeeded"})
    small = await s.wait_run(await s.submit(diamond()), timeout=30)
    assert small["status"] == "succeeded"
    ended = parse(step_of(small, "d")["finishedAt"])
    fan = await s.run(big)
    done_before = sum(
        1
        for i in range(FANOUT)
        if (at := step_of(fan, f"b{i}").get("finishedAt")) and parse(at) <= ended
    )
    # In arrival order the diamond's steps would wait for every step of the fan-out.
    assert done_before < FANOUT // 4, done_before
    await s.request("POST", f"/api/runs/{big}/cancel")
    assert (await s.wait_run(big))["status"] == "cancelled"
