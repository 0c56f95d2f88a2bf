"""Calls through an orchestrator's death (docs/sub-workflows.md): the orchestrator dies
once it has told a parent its child's end and before it stored that end; the one started
again ends the child again, tells the parent again (one message id), and the parent's step
after the call runs once."""

from __future__ import annotations

from pathlib import Path

from tests.support.stack import StackFactory, step_of, until


async def test_a_child_end_told_and_not_stored_ends_the_parent_step_once(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2, services=("dispatcher", "gateway"), wait=False)
    dying = s.start("orchestrator", HEDDLE_FAILPOINTS="orchestrator.child_told=exit")
    await s.wait_ready(2)
    ledger = tmp_path / "ledger"
    child = {"name": "child", "steps": [{"id": "make", "command": "echo v=1 >> $HEDDLE_OUTPUTS"}]}
    status, body = await s.request("POST", "/api/workflows", json=child)
    assert status == 201, body
    after = {
        "id": "after",
        "command": f'echo "$HEDDLE_OUT_CALL_MAKE_V" >> {ledger}',
        "dependsOn": ["call"],
    }
    run_id = await s.submit({"steps": [{"id": "call", "workflow": {"name": "child"}}, after]})
    await until(lambda: not dying.alive(), 30, "the orchestrator never reached the failpoint")
    s.start("orchestrator")
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded", run
    call = step_of(run, "call")
    assert (call["attempt"], call["outputs"]) == (1, {"make_v": "1"})
    child_run = await s.wait_run(call["childRun"])
    assert child_run["status"] == "succeeded"
    assert ledger.read_text().split() == ["1"]


async def test_an_orchestrator_killed_while_a_child_runs_makes_no_second_child(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=2)
    ledger, go = tmp_path / "ledger", tmp_path / "go"
    wait = f"echo ran >> {ledger}; while [ ! -e {go} ]; do sleep 0.05; done"
    child = {"name": "child", "steps": [{"id": "w", "command": wait}]}
    status, body = await s.request("POST", "/api/workflows", json=child)
    assert status == 201, body
    run_id = await s.submit({"steps": [{"id": "call", "workflow": {"name": "child"}}]})
    await until(ledger.exists, 30, "the child never ran")
    s.kill("orchestrator")
    s.start("orchestrator")  # rebuilds the parent, which sends its child's start again
    call = await s.wait_step(run_id, "call", {"running"})
    go.touch()
    run = await s.wait_run(run_id, timeout=60)
    assert run["status"] == "succeeded", run
    assert (await s.run(call["childRun"]))["status"] == "succeeded"
    assert ledger.read_text().split() == ["ran"]  # one child, its step run once
