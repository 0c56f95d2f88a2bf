"""Workflows that call workflows (docs/sub-workflows.md), through all four services: a call
step's child run, its outputs passed on, its failure, its cancel with its parent, the
depth bound, a retry that reuses it, and the registrations refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.namespaces import create_namespaces
from tests.support.stack import Stack, StackFactory, step_of

CHILD = {
    "name": "child",
    "params": [{"name": "who"}, {"name": "greeting", "default": "hi"}],
    "steps": [
        {
            "id": "make",
            "command": 'echo "word=$HEDDLE_PARAM_GREETING-$HEDDLE_PARAM_WHO" >> $HEDDLE_OUTPUTS',
        }
    ],
}
CALL = {"id": "call", "workflow": {"name": "child", "params": {"who": "ann"}}}
AFTER = {
    "id": "after",
    "command": 'echo "got=$HEDDLE_OUT_CALL_MAKE_WORD" >> $HEDDLE_OUTPUTS',
    "dependsOn": ["call"],
}


async def register(s: Stack, doc: dict[str, Any], expect: int = 201) -> dict[str, Any]:
    status, body = await s.request("POST", "/api/workflows", json=doc)
    assert status == expect, body
    return body


def problems(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["path"], p["message"]) for p in body["problems"]]


async def test_a_child_runs_passes_its_outputs_on_and_links_both_ways(stack: StackFactory) -> None:
    s = await stack(runners=2)
    await register(s, CHILD)
    run_id = await s.submit({"steps": [CALL, AFTER]})
    run = await s.wait_run(run_id)
    assert run["status"] == "succeeded", run
    call = step_of(run, "call")
    assert call["outputs"] == {"make_word": "hi-ann"}
    assert call["workflow"] == {"name": "child", "params": {"who": "ann"}}
    assert step_of(run, "after")["outputs"] == {"got": "hi-ann"}
    child = await s.run(call["childRun"])
    assert (child["parentRun"], child["parentStep"], child["callDepth"]) == (run_id, "call", 1)
    assert (child["workflowName"], child["trigger"], child["status"]) == (
        "child",
        "call",
        "succeeded",
    )
    assert child["params"] == {"who": "ann", "greeting": "hi"}
    assert (run["parentRun"], run["callDepth"]) == (None, 0)
    assert call["attempts"][-1]["childRun"] == call["childRun"]


async def test_a_child_failure_fails_the_step_and_a_retry_reuses_a_child_that_succeeded(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    await register(s, CHILD)
    await register(s, {"name": "broken", "steps": [{"id": "no", "command": "exit 3"}]})
    run_id = await s.submit({"steps": [{"id": "call", "workflow": {"name": "broken"}}, AFTER]})
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    call = step_of(run, "call")
    assert call["status"] == "failed"
    assert call["reason"].startswith(f"child run {call['childRun']} failed: step no failed")
    assert step_of(run, "after")["status"] == "skipped"
    assert (await s.run(call["childRun"]))["status"] == "failed"
    # A parent whose step after the call fails: its retry keeps the child that succeeded.
    fixed = tmp_path / "fixed"
    later = {"id": "later", "command": f"test -f {fixed}", "dependsOn": ["call"]}
    run_id = await s.submit({"steps": [CALL, later]})
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    first_child = step_of(run, "call")["childRun"]
    fixed.touch()
    status, body = await s.request("POST", f"/api/runs/{run_id}/retry")
    assert status == 201, body
    retry = await s.wait_run(body["runId"])
    assert retry["status"] == "succeeded", retry
    call = step_of(retry, "call")
    assert (call["childRun"], call["outputs"]) == (first_child, {"make_word": "hi-ann"})
    assert call["reason"] == f"succeeded in run {run_id}; not run again"
    status, runs = await s.request("GET", "/api/workflows/child/runs")
    assert status == 200, runs
    assert [r["runId"] for r in runs["runs"]] == [first_child]  # no second child


async def test_cancelling_a_parent_cancels_its_child_and_calls_nest_no_deeper_than_the_bound(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2, HEDDLE_MAX_CALL_DEPTH="1")
    await register(s, {"name": "slow", "steps": [{"id": "wait", "command": "sleep 60"}]})
    run_id = await s.submit({"steps": [{"id": "call", "workflow": {"name": "slow"}}]})
    call = await s.wait_step(run_id, "call", {"running"})
    await s.wait_step(call["childRun"], "wait", {"running"})
    status, body = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status in (200, 202), body
    run = await s.wait_run(run_id)
    assert (run["status"], step_of(run, "call")["status"]) == ("cancelled", "cancelled")
    child = await s.wait_run(call["childRun"])
    assert child["status"] == "cancelled"
    # Depth 1 calls depth 2: past HEDDLE_MAX_CALL_DEPTH, the inner call step fails.
    await register(s, {"name": "leaf", "steps": [{"id": "a", "command": "true"}]})
    await register(s, {"name": "mid", "steps": [{"id": "in", "workflow": {"name": "leaf"}}]})
    run_id = await s.submit({"steps": [{"id": "out", "workflow": {"name": "mid"}}]})
    run = await s.wait_run(run_id)
    assert run["status"] == "failed"
    mid = await s.run(step_of(run, "out")["childRun"])
    inner = step_of(mid, "in")
    assert inner["status"] == "failed" and "HEDDLE_MAX_CALL_DEPTH (1)" in inner["reason"]
    assert inner["childRun"] is not None
    status, _ = await s.request("GET", f"/api/runs/{inner['childRun']}")
    assert status == 404  # never started


async def test_calls_are_checked_when_registered_and_submitted(stack: StackFactory) -> None:
    s = await stack(runners=1)
    await register(s, {"name": "b", "steps": [{"id": "x", "command": "true"}]})
    await register(s, {"name": "a", "steps": [{"id": "y", "workflow": {"name": "b"}}]})
    body = await register(
        s, {"name": "b", "steps": [{"id": "x", "workflow": {"name": "a"}}]}, expect=400
    )
    assert problems(body) == [("steps", "workflow 'b' would call itself: b -> a -> b")]
    body = await register(
        s, {"name": "a", "steps": [{"id": "y", "workflow": {"name": "a"}}]}, expect=400
    )
    assert problems(body) == [("steps", "workflow 'a' would call itself")]
    new = {"name": "new", "steps": [{"id": "z", "workflow": {"name": "new"}}]}
    body = await register(s, new, expect=400)
    assert problems(body) == [("steps", "workflow 'new' would call itself")]
    await register(s, CHILD)
    doc = {
        "steps": [
            {"id": "p", "workflow": {"name": "nobody"}},
            {"id": "q", "workflow": {"name": "child", "version": 7, "params": {"who": "x"}}},
            {"id": "r", "workflow": {"name": "child", "params": {"colour": "red"}}},
        ]
    }
    status, body = await s.request("POST", "/api/runs", json=doc)
    assert status == 400, body
    assert problems(body) == [
        ("steps[0].workflow.name", "workflow 'nobody' is not registered in namespace 'default'"),
        ("steps[1].workflow.version", "workflow 'child' has no version 7"),
        (
            "steps[2].workflow.params.colour",
            "workflow 'child' version 1 declares no parameter 'colour'",
        ),
        ("steps[2].workflow.params", "parameter 'who' of workflow 'child' has no default: give it"),
    ]


async def test_a_child_is_in_its_parents_namespace_and_named_as_its_ids_are(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    nc = await s.connect()
    await create_namespaces(nc, "team-a")
    await nc.close()
    await register(s, {**CHILD, "namespace": "team-a"})
    doc = {"namespace": "team-a", "runId": "parent", "steps": [CALL, AFTER]}
    assert await s.submit(doc) == "parent"
    run = await s.wait_run("parent?namespace=team-a")
    assert run["status"] == "succeeded", run
    child_id = step_of(run, "call")["childRun"]
    assert "=" not in child_id
    child = await s.run(f"{child_id}?namespace=team-a")
    assert (child["namespace"], child["parentRun"], child["workflowName"]) == (
        "team-a",
        "parent",
        "child",
    )
    # Not registered in default: a run there cannot call it.
    status, body = await s.request("POST", "/api/runs", json={"steps": [CALL]})
    assert status == 400
    assert problems(body) == [
        ("steps[0].workflow.name", "workflow 'child' is not registered in namespace 'default'")
    ]
