"""Exit handlers through all four services (docs/workflows.md, "Exit handlers"): after a
success, a failure and a cancel, told how the run went; a second cancel stops them."""

from __future__ import annotations

from tests.support.stack import StackFactory, step_of, step_statuses

REPORT = 'echo "$HEDDLE_RUN_STATUS|$HEDDLE_FAILED_STEPS"'


async def test_exit_handlers_after_a_success_and_a_failure(stack: StackFactory) -> None:
    s = await stack(runners=2)
    doc = {
        "steps": [{"id": "a", "command": "exit $FAIL"}, {"id": "b", "command": "true"}],
        "onExit": [
            {"id": "report", "command": REPORT},
            {"id": "after", "command": "true", "dependsOn": ["report"]},
        ],
    }
    run = await s.wait_run(await s.submit({**doc, "env": {"FAIL": "0"}}))
    assert run["status"] == "succeeded", run
    assert step_of(run, "report")["stdoutTail"] == "succeeded|"
    assert step_of(run, "report")["onExit"] is True and step_of(run, "a")["onExit"] is False
    assert step_of(run, "report")["startedAt"] >= max(
        step_of(run, "a")["finishedAt"], step_of(run, "b")["finishedAt"]
    )
    run = await s.wait_run(await s.submit({**doc, "env": {"FAIL": "1"}}))
    assert run["status"] == "failed", run
    assert step_statuses(run) == {
        "a": "failed",
        "b": "succeeded",
        "report": "succeeded",
        "after": "succeeded",
    }
    assert step_of(run, "report")["stdoutTail"] == "failed|a"


async def test_a_cancel_runs_the_exit_handlers_and_a_second_stops_them(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2)
    run_id = await s.submit(
        {
            "steps": [{"id": "long", "command": "sleep 30"}],
            "onExit": [
                {"id": "report", "command": REPORT},
                {"id": "slow", "command": "sleep 30", "dependsOn": ["report"]},
            ],
        }
    )
    await s.wait_step(run_id, "long", {"running"})
    status, body = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status == 202, body
    await s.wait_step(run_id, "slow", {"running"})
    run = await s.run(run_id)
    assert step_of(run, "long")["status"] == "cancelled"
    assert step_of(run, "report")["stdoutTail"] == "cancelled|"
    assert run["status"] == "running"  # its exit handlers still run
    status, body = await s.request("POST", f"/api/runs/{run_id}/cancel")
    assert status == 202, body
    run = await s.wait_run(run_id, timeout=20)
    assert run["status"] == "cancelled"
    assert step_statuses(run) == {"long": "cancelled", "report": "succeeded", "slow": "cancelled"}


async def test_a_bad_exit_handler_is_refused_with_its_path(stack: StackFactory) -> None:
    s = await stack(runners=1)
    status, body = await s.request(
        "POST",
        "/api/runs",
        json={
            "steps": [{"id": "a", "command": "true"}],
            "onExit": [{"id": "n", "command": "true", "dependsOn": ["a"]}],
        },
    )
    assert status == 400
    assert [p["path"] for p in body["problems"]] == ["onExit[0].dependsOn[0]"]


async def test_past_the_deadline_the_exit_handlers_run_and_the_run_fails(
    stack: StackFactory,
) -> None:
    s = await stack(runners=2)
    run_id = await s.submit(
        {
            "timeoutSeconds": 1.5,
            "steps": [{"id": "long", "command": "sleep 30"}],
            "onExit": [{"id": "report", "command": REPORT}],
        }
    )
    run = await s.wait_run(run_id, timeout=30)
    assert run["status"] == "failed" and run["reason"].startswith("deadline"), run
    assert step_statuses(run) == {"long": "cancelled", "report": "succeeded"}
    assert step_of(run, "report")["stdoutTail"] == "failed|"
