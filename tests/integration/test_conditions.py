"""Conditions through all four services (docs/workflows.md, "Conditions"): on a parameter,
on an output, on a failure; a condition refused at submit and at register with its path,
locally by the command line too; one that fails as it is evaluated fails its step alone."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import env_of, heddle
from tests.support.stack import StackFactory, step_of, step_statuses

CONDITIONS = {
    "name": "conditions",
    "params": [{"name": "env", "default": "dev"}],
    "steps": [
        {"id": "build", "command": 'echo "ready=yes" >> "$HEDDLE_OUTPUTS"; exit $FAIL'},
        {
            "id": "deploy",
            "command": "echo deployed",
            "dependsOn": ["build"],
            "when": "params.env == 'prod'",
        },
        {
            "id": "ready",
            "command": "true",
            "dependsOn": ["build"],
            "when": "has(steps.build.outputs.ready) && steps.build.outputs.ready == 'yes'",
        },
        {
            "id": "clean",
            "command": "echo cleaned",
            "dependsOn": ["build"],
            "when": "steps.build.status == 'failed'",
        },
        {"id": "after", "command": "true", "dependsOn": ["build"]},
    ],
}


async def test_conditions_on_a_parameter_an_output_and_a_failure(stack: StackFactory) -> None:
    s = await stack(runners=2)
    status, body = await s.request(
        "POST", "/api/workflows", json={**CONDITIONS, "env": {"FAIL": "0"}}
    )
    assert status == 201, body
    status, body = await s.request(
        "POST", "/api/workflows/conditions/runs", json={"params": {"env": "prod"}}
    )
    assert status == 201, body
    run = await s.wait_run(body["runId"])
    assert run["status"] == "succeeded", run
    assert step_statuses(run) == {
        "build": "succeeded",
        "deploy": "succeeded",
        "ready": "succeeded",
        "clean": "skipped",
        "after": "succeeded",
    }
    assert step_of(run, "clean")["reason"] == (
        "skipped: when \"steps.build.status == 'failed'\" is false"
    )
    assert step_of(run, "clean")["when"] == "steps.build.status == 'failed'"
    # The default parameter: no deploy. A failed build: the clean-up runs, the run fails.
    run_id = await s.submit({**CONDITIONS, "name": None, "env": {"FAIL": "1"}})
    run = await s.wait_run(run_id)
    assert run["status"] == "failed", run
    assert step_statuses(run) == {
        "build": "failed",
        "deploy": "skipped",
        "ready": "skipped",
        "clean": "succeeded",
        "after": "skipped",
    }
    assert step_of(run, "clean")["stdoutTail"] == "cleaned"


async def test_an_allowed_failure_leaves_the_run_succeeded(stack: StackFactory) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(
        {
            "steps": [
                {"id": "lint", "command": "exit 3", "allowFailure": True},
                {
                    "id": "report",
                    "command": "true",
                    "dependsOn": ["lint"],
                    "when": "steps.lint.status == 'failed'",
                },
            ]
        }
    )
    run = await s.wait_run(run_id)
    assert run["status"] == "succeeded", run
    assert step_statuses(run) == {"lint": "failed", "report": "succeeded"}
    assert step_of(run, "lint")["allowFailure"] is True


async def test_a_condition_that_fails_as_it_is_evaluated_fails_its_step_alone(
    stack: StackFactory,
) -> None:
    s = await stack(runners=1)
    run_id = await s.submit(
        {
            "steps": [
                {"id": "a", "command": "true"},
                {
                    "id": "b",
                    "command": "true",
                    "dependsOn": ["a"],
                    "when": "steps.a.outputs.missing == 'x'",
                },
                {"id": "c", "command": "true", "dependsOn": ["b"]},
                {"id": "d", "command": "true", "dependsOn": ["a"]},
            ]
        }
    )
    run = await s.wait_run(run_id)
    assert step_statuses(run) == {"a": "succeeded", "b": "failed", "c": "skipped", "d": "succeeded"}
    reason = step_of(run, "b")["reason"]
    assert reason.startswith("when ") and "missing" in reason, reason
    assert run["status"] == "failed"
    # The orchestrator goes on: the next run is served as usual.
    run = await s.wait_run(await s.submit({"steps": [{"id": "x", "command": "true"}]}))
    assert run["status"] == "succeeded"


BAD = {
    "name": "bad-conditions",
    "steps": [
        {"id": "a", "command": "true"},
        {"id": "b", "command": "true", "dependsOn": ["a"], "when": "steps.a.status =="},
        {"id": "c", "command": "true", "when": "steps.a.status == 'failed'"},
        {"id": "d", "command": "true", "when": "params.env"},
        {"id": "e", "command": "true", "when": 3, "allowFailure": "yes"},
    ],
}
BAD_PATHS = sorted(
    ["steps[1].when", "steps[2].when", "steps[3].when", "steps[4].when", "steps[4].allowFailure"]
)


async def test_a_bad_condition_is_refused_with_its_path_everywhere(
    stack: StackFactory, tmp_path: Path
) -> None:
    s = await stack(runners=1)
    for path, doc in (("/api/workflows", BAD), ("/api/runs", {"steps": BAD["steps"]})):
        status, body = await s.request("POST", path, json=doc)
        assert status == 400, body
        assert sorted(p["path"] for p in body["problems"]) == BAD_PATHS, body
    messages = {p["path"]: p["message"] for p in body["problems"]}
    assert "not upstream" in messages["steps[2].when"]
    assert "bool" in messages["steps[3].when"]
    file = tmp_path / "bad.json"
    file.write_text(json.dumps(BAD))
    for command in ("submit", "register"):
        code, _out, err = await heddle(command, str(file), env=env_of(s))
        assert code != 0
        for p in BAD_PATHS:
            assert p in err, (command, err)
