"""Loops through all four services (docs/workflows.md, "Loops"): a forEach over an upstream
output of 1,000 items, maxParallel respected as the instances' own times show it; an empty
list; a list past HEDDLE_MAX_ITEMS; the instances' outputs downstream as a JSON array; an
instance's step document and logs by its id."""

from __future__ import annotations

import json
from typing import Any

from tests.support.stack import StackFactory, step_of, step_statuses


def most_at_once(steps: list[dict[str, Any]]) -> int:
    """The most of ``steps`` running at one moment, from their startedAt and finishedAt
    (an end before a start at the same moment)."""
    moments = []
    for s in steps:
        moments.append((s["startedAt"], 1))
        moments.append((s["finishedAt"], -1))
    moments.sort(key=lambda m: (m[0], m[1]))
    most = now = 0
    for _, change in moments:
        now += change
        most = max(most, now)
    return most


async def test_a_thousand_items_run_at_most_max_parallel_at_once(stack: StackFactory) -> None:
    s = await stack(runners=12)
    run_id = await s.submit(
        {
            "steps": [
                {
                    "id": "list",
                    "command": 'echo "files=[$(seq -s, 0 999)]" >> "$HEDDLE_OUTPUTS"',
                },
                {
                    "id": "each",
                    "command": "sleep 0.02; echo item $HEDDLE_ITEM",
                    "dependsOn": ["list"],
                    "forEach": "steps.list.outputs.files",
                    "maxParallel": 8,
                },
                {"id": "after", "command": "true", "dependsOn": ["each"]},
            ]
        }
    )
    run = await s.wait_run(run_id, timeout=300)
    assert run["status"] == "succeeded", {k: v for k, v in run.items() if k != "steps"}
    instances = [st for st in run["steps"] if st.get("parent") == "each"]
    assert len(instances) == 1000
    assert run["stepCount"] == 1003
    assert sorted(st["itemIndex"] for st in instances) == list(range(1000))
    assert all(st["status"] == "succeeded" for st in instances)
    assert step_of(run, "each[7]")["item"] == "7"
    assert step_of(run, "each[7]")["stdoutTail"] == "item 7"
    assert 1 < most_at_once(instances) <= 8
    assert step_of(run, "each")["status"] == "succeeded"
    assert step_of(run, "after")["status"] == "succeeded"


async def test_an_empty_list_a_list_past_the_cap_and_outputs_downstream(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_MAX_ITEMS="5")
    run_id = await s.submit(
        {
            "steps": [
                {
                    "id": "each",
                    "command": 'echo "double=$((HEDDLE_ITEM * 2))" >> "$HEDDLE_OUTPUTS"',
                    "forEach": "[0, 1, 2]",
                },
                {"id": "none", "command": "true", "forEach": "[]"},
                {
                    "id": "sum",
                    "command": 'echo "$HEDDLE_OUT_EACH_DOUBLE"',
                    "dependsOn": ["each", "none"],
                    "when": 'steps.each.outputs.double == \'["0","2","4"]\'',
                },
            ]
        }
    )
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded", run
    assert step_statuses(run) == {
        "each": "succeeded",
        "none": "succeeded",
        "sum": "succeeded",
        "each[0]": "succeeded",
        "each[1]": "succeeded",
        "each[2]": "succeeded",
    }
    assert json.loads(step_of(run, "sum")["stdoutTail"]) == ["0", "2", "4"]
    assert step_of(run, "each")["outputs"] == {"double": '["0","2","4"]'}
    # An instance by its id, through the step routes (the brackets as they are, or encoded).
    for path in (f"/api/runs/{run_id}/steps/each[1]", f"/api/runs/{run_id}/steps/each%5B1%5D"):
        status, body = await s.request("GET", path)
        assert status == 200, (path, body)
        assert body["id"] == "each[1]" and body["item"] == "1"
    status, body = await s.request("GET", f"/api/runs/{run_id}/steps/each[1]/logs")
    assert status == 200, body
    status, _ = await s.request("GET", f"/api/runs/{run_id}/steps/each[x]")
    assert status == 400
    # Past the cap: the step fails with the count; nothing runs.
    run_id = await s.submit(
        {"steps": [{"id": "big", "command": "true", "forEach": "[1, 2, 3, 4, 5, 6]"}]}
    )
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "failed"
    assert step_statuses(run) == {"big": "failed"}
    assert "6 items" in step_of(run, "big")["reason"]


async def test_a_cancel_stops_a_loop_and_a_failure_skips_the_rest(stack: StackFactory) -> None:
    s = await stack(runners=2)
    run_id = await s.submit(
        {
            "steps": [
                {"id": "each", "command": "sleep 60", "forEach": "[1, 2, 3]", "maxParallel": 1},
            ]
        }
    )
    await s.wait_step(run_id, "each[0]", {"running"})
    status, body = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status == 202, body
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "cancelled"
    assert step_statuses(run) == {
        "each": "cancelled",
        "each[0]": "cancelled",
        "each[1]": "cancelled",
        "each[2]": "cancelled",
    }
    # One instance fails: its step fails at once, and the instances not started are skipped.
    run_id = await s.submit(
        {
            "steps": [
                {
                    "id": "each",
                    "command": '[ "$HEDDLE_ITEM" != b ]',
                    "forEach": "['a', 'b', 'c', 'd']",
                    "maxParallel": 1,
                },
                {"id": "after", "command": "true", "dependsOn": ["each"]},
            ]
        }
    )
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "failed"
    assert step_statuses(run) == {
        "each": "failed",
        "after": "skipped",
        "each[0]": "succeeded",
        "each[1]": "failed",
        "each[2]": "skipped",
        "each[3]": "skipped",
    }
    assert step_of(run, "each")["reason"].startswith("instance each[1] failed")
