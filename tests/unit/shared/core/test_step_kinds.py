"""shared/core/step_kinds.py, for approval gates: a step is a command or a gate (or a call),
never two; a gate's message and timeout checked, and what only a runner's step may have
refused, each problem at its path (docs/approvals.md)."""

from __future__ import annotations

from typing import Any

import pytest
from heddle.shared.core.step_kinds import MAX_MESSAGE, kind_of, kind_problems
from heddle.shared.core.validation import Limits, parse_run_request, workflow_problems
from heddle.shared.wire.contracts import Approval
from heddle.shared.wire.errors import InvalidWorkflow


def gate(**approval: Any) -> dict[str, Any]:
    return {"id": "ok", "approval": {"message": "ship it?", **approval}}


def paths(step: dict[str, Any]) -> dict[str, str]:
    return {p.path: p.message for p in kind_problems(step, "steps[0]")}


def test_a_gate_is_its_own_kind() -> None:
    assert kind_of(gate()) == "approval"
    assert kind_of({"id": "a", "command": "true"}) == "command"
    assert kind_of({"id": "a", "command": "true", **{"approval": {"message": "m"}}}) is None
    assert paths(gate(timeoutSeconds=30)) == {}


def test_a_step_with_a_command_and_a_gate_is_refused() -> None:
    found = paths({**gate(), "command": "true"})
    assert found == {
        "steps[0]": "a step has one of command, approval and workflow, not command and approval"
    }


def test_a_step_with_neither_names_the_missing_field() -> None:
    assert "steps[0].command" in paths({"id": "a"})


@pytest.mark.parametrize(
    ("approval", "path"),
    [
        ({"message": ""}, "steps[0].approval.message"),
        ({"message": "  "}, "steps[0].approval.message"),
        ({"message": 3}, "steps[0].approval.message"),
        ({"message": "m" * (MAX_MESSAGE + 1)}, "steps[0].approval.message"),
        ({"message": "m", "timeoutSeconds": 0}, "steps[0].approval.timeoutSeconds"),
        ({"message": "m", "timeoutSeconds": -1}, "steps[0].approval.timeoutSeconds"),
        ({"message": "m", "timeoutSeconds": True}, "steps[0].approval.timeoutSeconds"),
        ({"message": "m", "timeoutSeconds": "1h"}, "steps[0].approval.timeoutSeconds"),
        ({"message": "m", "who": "ops"}, "steps[0].approval.who"),
    ],
)
def test_a_bad_gate_names_its_field(approval: dict[str, Any], path: str) -> None:
    assert path in paths({"id": "ok", "approval": approval})


def test_a_gate_not_an_object_is_refused() -> None:
    assert "steps[0].approval" in paths({"id": "ok", "approval": "yes"})


def test_a_gate_takes_nothing_only_a_runner_would() -> None:
    step = {**gate(), "runsOn": ["gpu"], "semaphores": ["db"], "maxParallel": 2}
    found = paths(step)
    assert set(found) == {"steps[0].runsOn", "steps[0].semaphores", "steps[0].maxParallel"}
    assert all("no runner" in m for m in found.values())


def test_every_problem_of_a_document_is_named_at_once() -> None:
    doc = {
        "steps": [
            {"id": "a", "command": "true"},
            {"id": "ok", "dependsOn": ["a"], "approval": {"message": ""}, "runsOn": ["x"]},
        ]
    }
    found = {p.path for p in workflow_problems(doc, Limits())}
    assert {"steps[1].approval.message", "steps[1].runsOn"} <= found
    with pytest.raises(InvalidWorkflow):
        parse_run_request(doc, Limits())


def test_a_valid_gate_parses_into_its_step() -> None:
    doc = {"steps": [{"id": "ok", "approval": {"message": "go?", "timeoutSeconds": 60}}]}
    request = parse_run_request(doc, Limits())
    assert request.steps[0].approval == Approval(message="go?", timeout_seconds=60)
    assert request.steps[0].command == ""
